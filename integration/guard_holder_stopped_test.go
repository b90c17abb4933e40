package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process stopped (SIGSTOP) while it holds a key's guard lock, as a
// wrapper stopped inside a renewal would: status and list answer anyway,
// read without the guard, and say who holds it; run -w and run -n end as
// asked; cancel, prune and release --force say what they wait for and go
// on once the guard is free. The guard's holder here is flock(1), a real
// process holding LOCK_EX on the real guard file, stopped with its child.
func TestGuardHolderStopped(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	// A TTL far longer than the test: the holder's renewals, which wait
	// on the guard too, are not due before the guard is free again.
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", "10m", "--name", "a", "--",
		"sh", "-c", exclusive+`echo $$ > a.tmp && mv a.tmp a.pid && exec sleep 1000`))
	apids := s.pids("a.pid")
	s.waitHeld("job")

	guard := filepath.Join(s.state, "keys", "k-job", "guard")
	blocker, free := s.stoppedGuard(guard)
	// flock(1) took the lock: /proc/locks names it.
	note := fmt.Sprintf("the key's guard lock is held by pid %d (stopped); read without it, the answer may be momentarily stale", blocker)

	out, stderr, code := s.output("status", "job", "--exit-code")
	t.Logf("status, guard held by a stopped process: exit %d\n%s%s", code, out, stderr)
	if code != 0 || !strings.Contains(out, "held") || !strings.Contains(stderr, note) {
		t.Errorf("status --exit-code: exit %d, want 0 (held), and stderr naming the guard's holder (%q)", code, note)
	}
	if st := s.status("job"); st.State != "held" || st.Holder == nil || st.Holder.Name != "a" {
		t.Errorf("status --json: %+v, want held by a", st)
	}
	out, stderr, code = s.output("list")
	t.Logf("list: exit %d\n%s%s", code, out, stderr)
	if code != 0 || !strings.Contains(out, "job") || !strings.Contains(out, "held") || !strings.Contains(stderr, note) {
		t.Errorf("list: exit %d, want 0, a row for job held, and stderr naming the guard's holder", code)
	}

	// Waits the user bounded end as bounded, with the conflict code and
	// the message naming the holder, read by a status that does not hang
	// and is not waited for once more after the bound: the issue asks for
	// -w to end at its bound plus a small margin, so this asserts a bound
	// (under the guard's one-second wait that the closing status used to
	// add to it: 3.1 s for -w 2s), generous for a loaded machine.
	start := time.Now()
	_, stderr, code = s.output("run", "--key", "job", "-w", "2s", "--", "touch", "ran")
	took := time.Since(start)
	t.Logf("run -w 2s: exit %d after %v\n%s", code, took, stderr)
	if code != 75 || !strings.Contains(stderr, "gave up waiting after 2s: held by a (pid ") {
		t.Errorf("run -w 2s: exit %d, want 75 and the holder named", code)
	}
	if took > 2900*time.Millisecond {
		t.Errorf("run -w 2s took %v: it must end at its bound, not wait for the guard again", took)
	}
	// A longer wait reads the status line every second: it says once
	// that it reads without the guard, not at every read.
	_, stderr, code = s.output("run", "--key", "job", "-w", "4s", "--", "touch", "ran")
	if n := strings.Count(stderr, note); code != 75 || n != 1 {
		t.Errorf("run -w 4s: exit %d, and the read without the guard reported %d times, want 75 and once\n%s", code, n, stderr)
	}
	if code := s.run("nowait", "run", "--key", "job", "-n", "--", "touch", "ran"); code != 75 {
		t.Errorf("run -n: exit %d, want 75 (busy)", code)
	}
	s.waitLog("nowait", "guard lock")

	// Changes wait for the guard, and say so; a signal ends the wait.
	cancel := s.start(s.fencerun("cancel", "cancel", "job"))
	s.waitLog("cancel", fmt.Sprintf(`waiting for the key's guard lock: cancel goes on once it is free: path=%s held_by="pid %d (stopped)"`, guard, blocker))
	if err := cancel.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	t.Logf("cancel, SIGTERMed while it waited for the guard: exit %d", exitOf(t, cancel))

	release := s.start(s.fencerun("release", "release", "job", "--force"))
	prune := s.start(s.fencerun("prune", "prune"))
	s.waitLog("release", "waiting for the key's guard lock: release --force goes on once it is free")
	s.waitLog("prune", "waiting for the key's guard lock: prune goes on once it is free")
	free()
	if code := exitOf(t, release); code != 0 {
		t.Errorf("release --force, once the guard was free: exit %d, want 0", code)
	}
	if code := exitOf(t, prune); code != 0 {
		t.Errorf("prune, once the guard was free: exit %d, want 0", code)
	}
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder: exit %d after release --force, want 76", code)
	}
	goneAtExit(t, "a's command", apids...)
	s.noOverlap()
}

// A key whose live lock is held by a process with no record of it (its
// record deleted by hand, or an acquirer between its lock and its first
// write, stopped there with the guard or not): status and list call the
// key held and name no pid, since none is known; list used to print
// "(pid 0)". The lock's holder here is flock(1) on the real live file.
func TestLockWithoutARecordNamesNoPid(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	if code := s.run("first", "run", "--key", "nr", "--", "true"); code != 0 {
		t.Fatalf("first run: exit %d", code)
	}
	live := filepath.Join(s.state, "keys", "k-nr", "live")
	locker := exec.Command("flock", live, "sh", "-c", `echo $$ > locker.tmp && mv locker.tmp locker.pid && exec sleep 1000`)
	s.prepare(locker, "locker")
	locker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.start(locker)
	t.Cleanup(func() {
		_ = syscall.Kill(-locker.Process.Pid, syscall.SIGKILL)
		_ = locker.Wait()
	})
	s.pids("locker.pid")

	out, stderr, code := s.output("list")
	t.Logf("list: exit %d\n%s%s", code, out, stderr)
	row := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "nr ") {
			row = l
		}
	}
	if code != 0 || !strings.Contains(row, "held") || !strings.Contains(row, "has no record") {
		t.Errorf("list: exit %d, row %q: want nr held by a process with no record", code, row)
	}
	if strings.Contains(out, "pid 0") {
		t.Errorf("list names a pid 0:\n%s", out)
	}
	out, stderr, code = s.output("status", "nr")
	t.Logf("status: exit %d\n%s%s", code, out, stderr)
	if code != 0 || strings.Contains(out, "pid 0") {
		t.Errorf("status: exit %d, want 0 and no pid 0", code)
	}
}

// stoppedGuard makes flock(1) hold the guard lock file guard, stopped
// (SIGSTOP, with its child), as a wrapper stopped inside a change of its
// key would. It returns flock's pid (which /proc/locks names) and free,
// which kills it and waits until it is gone; free also runs at cleanup.
func (s *sandbox) stoppedGuard(guard string) (int, func()) {
	t := s.t
	t.Helper()
	blocker := exec.Command("flock", guard, "sh", "-c", `echo $$ > blocker.tmp && mv blocker.tmp blocker.pid && exec sleep 1000`)
	s.prepare(blocker, "blocker")
	blocker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.start(blocker)
	bpids := append(s.pids("blocker.pid"), blocker.Process.Pid)
	stopped := true
	free := func() {
		if !stopped {
			return
		}
		stopped = false
		_ = syscall.Kill(-blocker.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(-blocker.Process.Pid, syscall.SIGCONT)
		_ = blocker.Wait()
		waitGone(t, bpids...)
	}
	t.Cleanup(free)
	if err := syscall.Kill(-blocker.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, pid := range bpids {
		if err := waitFor(func() bool { return procState(pid) == 'T' }); err != nil {
			t.Fatalf("guard holder %d never stopped (state %q)", pid, procState(pid))
		}
	}
	return blocker.Process.Pid, free
}

// A holder whose key's guard another process holds for long (stopped)
// says whom its own renewal waits for, once, with the words waiting
// acquirers, cancel, prune and release --force use; before, it waited
// without a word. (Its check and release say it the same way: "the
// holder's check", "the holder's release".)
func TestHolderSaysWhomItsGuardWaitIsFor(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	// TTL 3 s: a renewal is due a second after the start.
	holder := s.start(s.fencerun("holder", "run", "--key", "hw", "--ttl", "3s", "--name", "a", "--",
		"sh", "-c", `echo $$ > a.tmp && mv a.tmp a.pid && exec sleep 1000`))
	apids := s.pids("a.pid")
	s.waitHeld("hw")
	guard := filepath.Join(s.state, "keys", "k-hw", "guard")
	blocker, free := s.stoppedGuard(guard)
	line := func(op string) string {
		return fmt.Sprintf(`waiting for the key's guard lock: %s goes on once it is free: path=%s held_by="pid %d (stopped)"`, op, guard, blocker)
	}
	s.waitLog("holder", line("the holder's write"))
	// The command is stopped (before the lease could expire, or at the
	// signal); the release waits behind the renewal in flight.
	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, apids...)
	free()
	code := exitOf(t, holder)
	t.Logf("holder: exit %d", code)
	if code != 76 && code != 143 {
		t.Errorf("holder: exit %d, want 76 (its lease ran out while its renewal waited) or 143 (SIGTERM)", code)
	}
	b, _ := os.ReadFile(s.path("holder.log"))
	if n := strings.Count(string(b), line("the holder's write")); n != 1 {
		t.Errorf("the holder said %d times whom its renewal waited for, want once:\n%s", n, b)
	}
}
