package integration

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// Many holders of one key on a real etcd (M4): the witnesses of
// slots_test.go, and etcdctl lock on the same name.

// M1, M4: eight jobs at --slots 3 on etcd: never more than 3 run, no two
// live ones share a slot, every fence is new.
func TestEtcdSlotsWitness(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	s := newSandbox(t)
	s.env = []string{"FENCERUN_ETCD=" + c.Endpoints()}
	var jobs []*exec.Cmd
	for i := range 8 {
		jobs = append(jobs, s.witness("pool", fmt.Sprintf("j%d", i), 3, "s", "--slots", "3", "--wait", "5m"))
	}
	s.slotHolders(s.waitMany("pool", 3, 5), 3)
	s.openAll(jobs)
}

// M4: an etcdctl lock holder is exclusive against slot holders, which
// wait behind it (never refused), and an etcdctl lock waits for every
// fencerun slot holder ahead of it. The witnesses' flock on rw (-x for
// etcdctl's, -s for the slots') catches any overlap when it happens.
func TestEtcdSlotsAndEtcdctlLock(t *testing.T) {
	needEtcdctl(t)
	c := etcdtest.Start(t, etcdtest.Options{})
	eps, cl := c.Endpoints(), c.Client()
	s := newSandbox(t)
	s.env = []string{"FENCERUN_ETCD=" + eps}
	lock := func(name string) *exec.Cmd {
		e := etcdctl(eps, "lock", "pool", "--", "sh", s.witnessFile(), s.work, name, "0", "x")
		s.prepare(e, name)
		t.Cleanup(func() { e.Process.Kill() })
		return s.start(e)
	}
	e1 := lock("E1")
	s.running("E1")
	a := s.witness("pool", "A", 2, "s", "--slots", "2", "--wait", "5m")
	b := s.witness("pool", "B", 2, "s", "--slots", "2", "--wait", "5m")
	waitContenders(t, cl, "pool", 3)
	// etcdctl's holder is the exclusive holder; the slot runs wait.
	st := s.waitMany("pool", 1, 2)
	if st.Holder == nil || st.Holders[0].Kind != "exclusive" || st.Waiters[0].Kind != "slot" || st.Waiters[1].Slots != 2 {
		t.Errorf("status --json with etcdctl holding and slot runs waiting: %+v", st)
	}
	e2 := lock("E2")
	waitContenders(t, cl, "pool", 4)

	s.letGo("E1")
	s.running("A")
	s.running("B") // together, in both slots
	s.letGo("A")
	if code := exitOf(t, a); code != 0 {
		t.Errorf("A exited %d", code)
	}
	waitContenders(t, cl, "pool", 2) // B, and E2 still waiting for it
	s.letGo("B")
	s.running("E2")
	s.letGo("E2")
	for name, cmd := range map[string]*exec.Cmd{"E1": e1, "B": b, "E2": e2} {
		if code := exitOf(t, cmd); code != 0 {
			t.Errorf("%s exited %d", name, code)
		}
	}
	s.noBad()
	order, _ := os.ReadFile(s.path("order"))
	if o := string(order); o != "E1\nA\nB\nE2\n" && o != "E1\nB\nA\nE2\n" {
		t.Errorf("run order:\n%s", o)
	}
}
