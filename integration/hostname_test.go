package integration

import (
	"os"
	"os/exec"
	"testing"
)

// S2 on the file backend, which is one host's: the next holder stops a
// SIGKILLed holder's leftovers before its command starts even when it
// runs under another hostname than the dead holder did (a UTS namespace
// of its own, as a container or unit sharing the state directory has, or
// a hostname changed since). Before, the leftovers were "another host's":
// the newcomer warned and started beside them (its flock -n on the dead
// holder's command's file failed).
func TestLeftoversRecordedUnderAnotherHostnameAreStopped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unshare -u needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	t.Parallel()
	s := newSandbox(t)
	excl := s.path("excl")
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--",
		"flock", "-n", excl, "sh", "-c", `echo $$ > pids.tmp && mv pids.tmp pids; exec sleep 1000`))
	pids := s.pids("pids")
	s.waitHeld("job")
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, holder); code != 128+9 {
		t.Fatalf("holder: exit %d, want 137 (SIGKILL)", code)
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("the killed holder's command %d is already gone: nothing to test", pid)
		}
	}

	next := s.fencerun("next", "run", "--key", "job", "--grace", "1s", "--",
		"flock", "-n", excl, "touch", "second-ran")
	next.Args = append([]string{unshare, "-u", "sh", "-c", `hostname review6-other-host && exec "$@"`, "sh"}, next.Args...)
	next.Path = unshare
	if code := exitOf(t, s.start(next)); code != 0 {
		t.Errorf("next holder under another hostname: exit %d, want 0 (1: its flock found the dead holder's command still running)", code)
	}
	if _, err := os.Stat(s.path("second-ran")); err != nil {
		t.Error("the next holder's command never ran")
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("the dead holder's command %d still runs", pid)
		}
	}
}
