package integration

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// A waiter makes its command's cgroup once it holds the lease, and its
// command runs there. A process of that command that left its
// group and session outlives the waiter SIGKILLed right after the start,
// and the next holder stops it (found by the cgroup its record names)
// before its own command runs, and removes the cgroup (S2).
func TestWaiterKilledAfterItsTakeLeavesNothingToTheNext(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	cg := newTestCgroup(t)
	if err := syscall.Mkfifo(s.path("go"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := s.start(s.fencerun("holder", "run", "--key", "k", "--", "sh", "-c", "read x < go"))
	s.waitHeld("k")
	w := s.fencerun("waiter", "run", "--key", "k", "--name", "waiter", "--", "sh", "-c",
		"setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > left.tmp; mv left.tmp left; exec sleep 1000")
	cg.start(t, w)
	s.waitQueue("k", "waiter")
	cg.noCgroupWhileWaiting(t)
	if err := os.WriteFile(s.path("go"), []byte("\n"), 0); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, h); code != 0 {
		t.Errorf("holder: exit %d", code)
	}
	waitFile(t, s.path("left"))
	made := cg.fencerunCgroups(t)
	if len(made) != 1 {
		t.Fatalf("the waiter, holding, made cgroups %v, want one", made)
	}
	w.Process.Kill()
	exitOf(t, w)
	left := readPids(s.path("left"))[0]
	if !alive(left) {
		t.Fatal("the leftover died with the wrapper: the test shows nothing")
	}
	if b, _ := os.ReadFile(cg.path + "/" + made[0] + "/cgroup.procs"); len(b) == 0 {
		t.Errorf("the leftover pid %d is not in the cgroup %s the waiter made", left, made[0])
	}
	script := `st=$(awk '{print $3}' /proc/` + strconv.Itoa(left) + `/stat 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ] && echo "alive" > saw; true`
	if code := s.run("next", "run", "--key", "k", "--grace", "1s", "--", "sh", "-c", script); code != 0 {
		t.Fatalf("next holder: exit %d", code)
	}
	if saw, err := os.ReadFile(s.path("saw")); err == nil {
		t.Errorf("the next holder's command ran beside the dead waiter's leftover pid %d: %s", left, saw)
	}
	if alive(left) {
		t.Errorf("leftover pid %d still alive", left)
	}
	if left := cg.fencerunCgroups(t); len(left) != 0 {
		t.Errorf("the dead waiter's cgroup is still there: %v", left)
	}
}
