package integration

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// S4, M1 on etcd: a fence is strictly above every earlier acquisition's
// of the key, across all slots. W1 queues before W2 at --slots 2; W1's
// fencerun is stopped (SIGSTOP) just as both slots free. W2 must not take
// before W1 (its fence would be above W1's, which takes later): it waits
// until W1, continued, has taken, and the fences rise in start order.
func TestEtcdSlotsFenceRisesInTakeOrder(t *testing.T) {
	fenceInTakeOrder(t, func(s *sandbox) []*exec.Cmd {
		return s.startSlots("pool", 2)
	}, func(s *sandbox, name string) *exec.Cmd {
		return s.witness("pool", name, 2, "s", "--slots", "2", "--wait", "5m")
	})
}

// The same for shared holds: S1 and S2 queue behind an exclusive holder
// and are admitted together as it ends; S1 is stopped, and S2 takes only
// after S1 has, with the higher fence.
func TestEtcdSharedFenceRisesInTakeOrder(t *testing.T) {
	fenceInTakeOrder(t, func(s *sandbox) []*exec.Cmd {
		x := s.witness("pool", "h0", 0, "x")
		s.running("h0")
		return []*exec.Cmd{x}
	}, func(s *sandbox, name string) *exec.Cmd {
		return s.witness("pool", name, 0, "s", "--shared", "--wait", "5m")
	})
}

// fenceInTakeOrder starts the holders (h0, ...), queues W1 then W2
// (waiter), stops W1's fencerun and ends the holders, gives W2 a moment
// in which it must not start (where it would, on the defect, it does),
// then continues W1: W1 takes first, and the fences rise in take order.
func fenceInTakeOrder(t *testing.T, holders func(*sandbox) []*exec.Cmd, waiter func(*sandbox, string) *exec.Cmd) {
	c := etcdtest.Start(t, etcdtest.Options{})
	eps, cl := c.Endpoints(), c.Client()
	s := newSandbox(t)
	s.env = []string{"FENCERUN_ETCD=" + eps}
	hs := holders(s)
	w1 := waiter(s, "W1")
	waitContenders(t, cl, "pool", len(hs)+1)
	w2 := waiter(s, "W2")
	waitContenders(t, cl, "pool", len(hs)+2)
	if err := w1.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(hs))
	for i := range hs {
		names[i] = "h" + strconv.Itoa(i)
	}
	s.letGo(names...)
	for _, h := range hs {
		exitOf(t, h)
	}
	waitContenders(t, cl, "pool", 2)
	// Not a timed assertion: only the time W2 is given to start wrongly,
	// as it did before takes went in fence order.
	early := false
	for end := time.Now().Add(time.Second); time.Now().Before(end) && !early; time.Sleep(20 * time.Millisecond) {
		_, err := os.Stat(s.path("run.W2"))
		early = err == nil
	}
	if early {
		t.Errorf("W2 started while W1, queued before it, was stopped: W1 would take a fence below one handed out before it")
	}
	if err := w1.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.running("W1")
	s.running("W2")
	// Once W1 runs, the two commands run side by side and either may
	// write its line first: what the fences must follow is the order of
	// the takes, W1's (queued first) before W2's.
	fence := map[string]uint64{}
	for _, f := range s.ranLines() {
		fence[f[0]], _ = strconv.ParseUint(f[3], 10, 64)
	}
	if len(fence) != len(hs)+2 || fence["W1"] >= fence["W2"] {
		t.Errorf("fences %v: want every run once, and W1's below W2's", fence)
	}
	s.letGo("W1", "W2")
	exitOf(t, w1)
	exitOf(t, w2)
	s.noBad()
}
