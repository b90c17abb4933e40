package storetest

import (
	"testing"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// Shared holders hold together, from two clients, each with slot -1; an
// exclusive claim is told who holds, or waits until every shared holder
// released (M2).
func testSharedTogether(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	a := acquire(t, s, "sh", b.sharedClaim("a"))
	nw := b.sharedClaim("b")
	nw.Wait = false
	c, h, err := s.Acquire(t.Context(), "sh", nw)
	if err != nil || c == nil {
		t.Fatalf("a second shared claim without wait = %v, holder %+v, %v; want it held beside the first", c, h, err)
	}
	d, h, err := b.openSecond(t, desc).Acquire(t.Context(), "sh", nw)
	if err != nil || d == nil {
		t.Fatalf("a third shared claim, from another client = %v, holder %+v, %v; want it held", d, h, err)
	}
	alone(t, b, s)
	for _, l := range []store.Lease{a, c, d} {
		if l.Slot() != -1 {
			t.Errorf("a shared lease has slot %d, want -1", l.Slot())
		}
	}
	if h := busy(t, s, "sh", b.claim("x")); h.Kind != store.KindShared {
		t.Errorf("an exclusive claim beside shared holders is told of %+v; want a shared holder", h)
	}
	x := waitAsync(t, s, "sh", b.claim("x"), guard)
	if st := waitWaiters(t, s, "sh", 1); st.Waiters[0].Kind != store.KindExclusive {
		t.Errorf("waiters %s; want the exclusive one", describeHolders(st.Waiters))
	}
	pending(t, x, "an exclusive claim beside three shared holders")
	release(t, a)
	release(t, c)
	if st := status(t, s, "sh"); len(st.Holders) != 1 || st.Holders[0].Fence != d.Fence() || len(st.Waiters) != 1 {
		t.Errorf("with one shared holder left: holders %s, waiters %s", describeHolders(st.Holders), describeHolders(st.Waiters))
	}
	pending(t, x, "an exclusive claim beside a shared holder")
	renews(t, d)
	release(t, d)
	lx := recv(t, x, "the exclusive claim once every shared holder released")
	if lx.Slot() != 0 {
		t.Errorf("an exclusive lease has slot %d, want 0", lx.Slot())
	}
	rising(t, a.Fence(), c.Fence(), d.Fence(), lx.Fence())
	release(t, lx)
}

// With a shared holder and an exclusive waiter, a shared claim that comes
// later waits for the exclusive one (no writer starvation), and one that
// does not wait is told the key is busy; waiters are served in arrival
// order across kinds (M2, S10).
func testSharedNoWriterStarvation(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	s1 := acquire(t, s, "ws", b.sharedClaim("s1"))
	x := waitAsync(t, s, "ws", b.claim("x"), guard)
	waitWaiters(t, s, "ws", 1)
	s2 := waitAsync(t, s, "ws", b.sharedClaim("s2"), guard)
	st := waitWaiters(t, s, "ws", 2)
	if w := st.Waiters; w[0].Name != "x" || w[0].Kind != store.KindExclusive || w[1].Name != "s2" || w[1].Kind != store.KindShared {
		t.Errorf("waiters %s; want x (exclusive) then s2 (shared)", describeHolders(w))
	}
	pending(t, s2, "a shared claim behind a waiting exclusive one")
	busy(t, s, "ws", b.sharedClaim("s3"))
	pending(t, x, "an exclusive claim beside a shared holder")
	release(t, s1)
	lx := recv(t, x, "the exclusive waiter")
	if st := status(t, s, "ws"); st.Holder == nil || st.Holder.Fence != lx.Fence() || len(st.Waiters) != 1 || st.Waiters[0].Name != "s2" {
		t.Errorf("with x holding: holder %+v, waiters %s; want s2 waiting", st.Holder, describeHolders(st.Waiters))
	}
	pending(t, s2, "a shared claim beside an exclusive holder")
	release(t, lx)
	l2 := recv(t, s2, "the shared waiter once the exclusive one released")
	rising(t, s1.Fence(), lx.Fence(), l2.Fence())
	release(t, l2)
}

// A shared waiter behind an exclusive waiter that dies is no longer
// behind anyone it must wait for: it holds beside the shared holder,
// which never released (M2, S10).
func testSharedBehindDeadExclusive(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	s1 := acquire(t, s, "sd", b.sharedClaim("s1"))
	stop := b.keepRenewed(t, s1) // through DeadAfter, longer than a TTL
	x := b.spawn(t, desc, "sd", "")
	waitWaiters(t, s, "sd", 1)
	s2 := waitAsync(t, s, "sd", b.sharedClaim("s2"), b.deadWithin())
	waitWaiters(t, s, "sd", 2)
	pending(t, s2, "a shared claim behind a waiting exclusive one")
	x.Kill()
	l := testsupport.RecvWithin(t, s2, b.deadWithin(), "the shared waiter once the exclusive one ahead died")
	if l == nil {
		t.FailNow()
	}
	stop()
	if st := status(t, s, "sd"); len(st.Holders) != 2 || len(st.Waiters) != 0 {
		t.Errorf("holders %s, waiters %s; want s1 and s2 holding, nobody waiting", describeHolders(st.Holders), describeHolders(st.Waiters))
	}
	renews(t, s1, l)
	releaseAll(t, s1, l)
}

// Consecutive shared waiters behind an exclusive holder all start once it
// releases, and hold together; an exclusive waiter behind them waits for
// all of them, and a shared waiter behind that one for it (M2).
func testSharedWaitersTogether(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	x := acquire(t, s, "wt", b.claim("x"))
	var shared []<-chan store.Lease
	for i, name := range []string{"s1", "s2", "s3"} {
		shared = append(shared, waitAsync(t, s, "wt", b.sharedClaim(name), guard))
		waitWaiters(t, s, "wt", i+1)
	}
	x2 := waitAsync(t, s, "wt", b.claim("x2"), guard)
	waitWaiters(t, s, "wt", 4)
	s4 := waitAsync(t, s, "wt", b.sharedClaim("s4"), guard)
	waitWaiters(t, s, "wt", 5)
	release(t, x)
	var ls []store.Lease
	for _, c := range shared {
		ls = append(ls, recv(t, c, "each of the consecutive shared waiters, together"))
	}
	st := status(t, s, "wt")
	if len(st.Holders) != 3 || len(st.Waiters) != 2 || st.Waiters[0].Name != "x2" || st.Waiters[1].Name != "s4" {
		t.Errorf("holders %s, waiters %s; want the 3 shared holders, x2 and s4 waiting", describeHolders(st.Holders), describeHolders(st.Waiters))
	}
	pending(t, x2, "an exclusive waiter beside three shared holders")
	pending(t, s4, "a shared waiter behind a waiting exclusive one")
	renews(t, ls...)
	releaseAll(t, ls...)
	l := recv(t, x2, "the exclusive waiter once the shared holders released")
	pending(t, s4, "a shared waiter beside an exclusive holder")
	release(t, l)
	l4 := recv(t, s4, "the last shared waiter")
	rising(t, x.Fence(), max(ls[0].Fence(), ls[1].Fence(), ls[2].Fence()), l.Fence(), l4.Fence())
	release(t, l4)
}

// alone checks that an exclusive claim waits for the last shared holder
// when the first has gone: no holder of any kind may remain.
func alone(t *testing.T, b *Backend, s store.Store) {
	t.Helper()
	first := acquire(t, s, "sh2", b.sharedClaim("first"))
	second := acquire(t, s, "sh2", b.sharedClaim("second"))
	release(t, first)
	if h := busy(t, s, "sh2", b.claim("x")); h.Fence != second.Fence() {
		t.Errorf("an exclusive claim beside the second shared holder is told of %+v; want that holder", h)
	}
	release(t, second)
	x := b.claim("x")
	x.Wait = false
	l, h, err := s.Acquire(t.Context(), "sh2", x)
	if err != nil || l == nil {
		t.Fatalf("an exclusive claim once every shared holder released = %v, holder %+v, %v", l, h, err)
	}
	release(t, l)
}
