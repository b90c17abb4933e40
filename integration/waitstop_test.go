package integration

import (
	"os/exec"
	"syscall"
	"testing"
)

// A stop signal sent to fencerun while it waits for its lease stops it
// alone, as its default action would (S7: job control as under flock(1)):
// fencerun catches the job signals from its start, in its one signal
// subscription, and has no command yet to hand them to. The waiter leads a
// process group of its own, as a shell's job does (in an orphaned group
// the kernel discards these stops), with a sleep in it that must not stop
// with it. Continued, the waiter waits on and runs its command once the
// holder is gone.
func TestStopWhileWaitingStopsTheWaiterAlone(t *testing.T) {
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "k", "--", "sleep", "1000"))
	s.waitHeld("k")
	w := s.fencerun("waiter", "run", "--key", "k", "--name", "waiter", "--", "touch", "ran")
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.start(w)
	mate := exec.Command("sleep", "1000")
	mate.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: w.Process.Pid}
	if err := mate.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mate.Process.Kill(); mate.Wait() })
	s.waitQueue("k", "waiter")
	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		if err := syscall.Kill(w.Process.Pid, sig); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(func() bool { return procState(w.Process.Pid) == 'T' }); err != nil {
			t.Fatalf("the waiter did not stop on %v: state %c", sig, procState(w.Process.Pid))
		}
		if st := procState(mate.Process.Pid); st == 'T' {
			t.Errorf("%v to the waiter stopped its process group too", sig)
		}
		if err := syscall.Kill(w.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(func() bool { return procState(w.Process.Pid) != 'T' }); err != nil {
			t.Fatalf("the waiter stayed stopped after SIGCONT (%v)", sig)
		}
	}
	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exitOf(t, holder)
	if code := exitOf(t, w); code != 0 {
		t.Errorf("waiter: exit %d, want 0", code)
	}
	waitFile(t, s.path("ran"))
}
