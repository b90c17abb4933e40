package integration

import (
	"strconv"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// S4, M1 on etcd: a fence is strictly above every earlier acquisition's
// of the key, across all slots. W1 queues before W2 at --slots 2; W1's
// fencerun is stopped (SIGSTOP) just as both slots free, so W2 takes
// first; W1, continued, takes the other slot later: its FENCERUN_FENCE
// must be above W2's, which a resource already saw.
func TestEtcdSlotsFenceRisesInTakeOrder(t *testing.T) {
	knownDefect(t, "on etcd a fence is the contender key's create revision, so holders admitted together take out of fence order (etcdstore doc)")
	c := etcdtest.Start(t, etcdtest.Options{})
	eps, cl := c.Endpoints(), c.Client()
	s := newSandbox(t)
	s.env = []string{"FENCERUN_ETCD=" + eps}
	hs := s.startSlots("pool", 2)
	w1 := s.witness("pool", "W1", 2, "s", "--slots", "2", "--wait", "5m")
	waitContenders(t, cl, "pool", 3)
	w2 := s.witness("pool", "W2", 2, "s", "--slots", "2", "--wait", "5m")
	waitContenders(t, cl, "pool", 4)
	if err := w1.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	s.letGo("h0", "h1")
	for _, h := range hs {
		exitOf(t, h)
	}
	s.running("W2")
	if err := w1.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.running("W1")
	fence := map[string]uint64{}
	var order []string
	for _, f := range s.ranLines() {
		fence[f[0]], _ = strconv.ParseUint(f[3], 10, 64)
		order = append(order, f[0])
	}
	if len(order) != 4 || order[2] != "W2" || order[3] != "W1" {
		t.Fatalf("run order %v, want h0 h1 W2 W1", order)
	}
	if fence["W1"] <= fence["W2"] {
		t.Errorf("W1 started after W2 with fence %d, not above W2's %d: a resource that saw W2's refuses W1, or takes it for older", fence["W1"], fence["W2"])
	}
	s.letGo("W1", "W2")
	exitOf(t, w1)
	exitOf(t, w2)
	s.noBad()
}
