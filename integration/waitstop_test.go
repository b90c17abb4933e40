package integration

import (
	"syscall"
	"testing"
)

// A stop signal sent to fencerun while it waits for its lease stops it
// alone, as its default action would (S7: job control as under flock(1)):
// fencerun catches the job signals from its start, in its one signal
// subscription, and has no command yet to hand them to. The waiter here is
// in the test's own process group, which must not stop with it. Continued,
// it waits on and runs its command once the holder is gone.
func TestStopWhileWaitingStopsTheWaiterAlone(t *testing.T) {
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "k", "--", "sleep", "1000"))
	s.waitHeld("k")
	w := s.start(s.fencerun("waiter", "run", "--key", "k", "--name", "waiter", "--", "touch", "ran"))
	s.waitQueue("k", "waiter")
	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		if err := syscall.Kill(w.Process.Pid, sig); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(func() bool { return procState(w.Process.Pid) == 'T' }); err != nil {
			t.Fatalf("the waiter did not stop on %v: state %c", sig, procState(w.Process.Pid))
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
