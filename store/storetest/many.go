package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// manyTests are the cases of many holders of one key (M1-M5): slots and
// shared holds, each S-property per holder. Run adds them when
// Backend.Many is set.
var manyTests = []struct {
	name string
	f    func(*testing.T, *Backend)
}{
	{"SlotsAdmitNLowestFirst", testSlotsAdmitN},
	{"SlotsStatusHolders", testSlotsStatus},
	{"SlotsMismatchErrSlots", testSlotsMismatch},
	{"SlotsFIFO", testSlotsFIFO},
	{"SlotsNoPhantomBusy", testSlotsNoPhantomBusy},
	{"SlotsDeadWaiterLosesPlace", testSlotsDeadWaiter},
	{"SlotsPruneKeepsFences", testSlotsPrune},
	{"KindsChangeOnceFree", testKindsChangeOnceFree},
	{"SlotsWitnessManyClients", testSlotsWitness},
	{"SharedExclusiveWitness", testSharedWitness},
	{"SharedHoldTogether", testSharedTogether},
	{"SharedNoWriterStarvation", testSharedNoWriterStarvation},
	{"SharedWaitersStartTogether", testSharedWaitersTogether},
	{"SharedBehindDeadExclusive", testSharedBehindDeadExclusive},
	{"RevokeOneSlot", testRevokeOneSlot},
	{"RevokeByPID", testRevokeByPID},
	{"RevokeSparesWaiters", testRevokeSparesWaiters},
	{"CancelWhich", testCancelWhich},
	{"DeadSlotHolderFreesOnlyItsSlot", testDeadSlotHolder},
	{"DeadSlotHolderWakesWaiter", testDeadSlotHolderWakesWaiter},
	{"LeftoversPerSlot", testLeftoversPerSlot},
	{"DeadHoldersBeyondN", testDeadHoldersBeyondN},
	{"DeadSharedHolderLeftoversToExclusive", testDeadSharedHolder},
	{"DeadSlotHoldersLeftoversToExclusiveAndShared", testDeadSlotHolders},
	{"DeadExclusiveLeftoversToSlotAndShared", testDeadExclusive},
	{"HistorySlots", testHistorySlots},
	{"OnceSlots", testOnceSlots},
}

func (b *Backend) slotClaim(name string, n int) store.Claim {
	c := b.claim(name)
	c.Slots = n
	return c
}

func (b *Backend) sharedClaim(name string) store.Claim {
	c := b.claim(name)
	c.Shared = true
	return c
}

// takeSlots takes n slot holds of n slots on key, one after the other:
// each gets the lowest free slot, 0..n-1.
func (b *Backend) takeSlots(t *testing.T, s store.Store, key string, n int) []store.Lease {
	t.Helper()
	var ls []store.Lease
	for i := range n {
		l := acquire(t, s, key, b.slotClaim(fmt.Sprint("slot", i), n))
		if l.Slot() != i {
			t.Errorf("holder %d of %d slots got slot %d, want %d (the lowest free)", i, n, l.Slot(), i)
		}
		ls = append(ls, l)
	}
	return ls
}

// busy acquires without waiting and fails unless the key is busy: no
// lease, no error, a holder named.
func busy(t *testing.T, s store.Store, key string, c store.Claim) *store.Holder {
	t.Helper()
	c.Wait = false
	l, h, err := s.Acquire(t.Context(), key, c)
	if err != nil || l != nil || h == nil {
		if l != nil {
			l.Release(t.Context())
		}
		t.Fatalf("Acquire(%q, %s) without wait = %v, holder %+v, %v; want contention naming a holder", key, c.Name, l, h, err)
	}
	return h
}

// pending fails if a waiting Acquire has already returned.
func pending(t *testing.T, got <-chan store.Lease, what string) {
	t.Helper()
	select {
	case l := <-got:
		if l != nil {
			t.Fatalf("%s acquired (slot %d, fence %d) while it must wait", what, l.Slot(), l.Fence())
		}
		t.Fatalf("%s returned while it must wait", what)
	default:
	}
}

// recv waits for a waiting Acquire's lease.
func recv(t *testing.T, got <-chan store.Lease, what string) store.Lease {
	t.Helper()
	l := testsupport.RecvWithin(t, got, guard, what)
	if l == nil {
		t.FailNow()
	}
	return l
}

// renews fails unless each lease still renews and has nothing asked of it.
func renews(t *testing.T, ls ...store.Lease) {
	t.Helper()
	for _, l := range ls {
		if _, err := l.Renew(t.Context()); err != nil {
			t.Errorf("Renew of slot %d (fence %d): %v; want it still held", l.Slot(), l.Fence(), err)
		}
	}
}

// lost fails unless the lease's renewal and check fail with ErrLost.
func lost(t *testing.T, l store.Lease) {
	t.Helper()
	if _, err := l.Renew(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Renew of slot %d (fence %d) = %v, want ErrLost", l.Slot(), l.Fence(), err)
	}
	if _, err := l.Check(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Check of slot %d (fence %d) = %v, want ErrLost", l.Slot(), l.Fence(), err)
	}
}

// requested fails unless the lease is held with req asked of it.
func requested(t *testing.T, l store.Lease, req store.Request) {
	t.Helper()
	if got, err := l.Check(t.Context()); err != nil || got != req {
		t.Errorf("Check of slot %d (fence %d) = %v, %v; want %v", l.Slot(), l.Fence(), got, err, req)
	}
}

func releaseAll(t *testing.T, ls ...store.Lease) {
	t.Helper()
	for _, l := range ls {
		release(t, l)
	}
}

// keepRenewed renews ls in the background, as their keepers would, until
// the stop it returns is called (at the latest by the test's cleanup):
// for waits that may last DeadAfter, longer than a lease's TTL. The
// leases are the keeper's alone until then.
func (b *Backend) keepRenewed(t *testing.T, ls ...store.Lease) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(b.TTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, l := range ls {
				if _, err := l.Renew(context.Background()); err != nil {
					t.Errorf("keeping slot %d (fence %d) renewed: %v", l.Slot(), l.Fence(), err)
				}
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// rising fails unless fences strictly rise.
func rising(t *testing.T, fences ...uint64) {
	t.Helper()
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences %v do not strictly rise (S4 across slots and kinds)", fences)
			return
		}
	}
}

func fencesOf(ls ...store.Lease) []uint64 {
	var out []uint64
	for _, l := range ls {
		out = append(out, l.Fence())
	}
	return out
}

// describeHolders is hs in one line, for failures.
func describeHolders(hs []store.Holder) string {
	out := ""
	for _, h := range hs {
		slot := "-"
		if h.Slot != nil {
			slot = fmt.Sprint(*h.Slot)
		}
		out += fmt.Sprintf("[%s slot %s of %d, %s pid %d fence %d] ", h.Kind, slot, h.Slots, h.Name, h.PID, h.Fence)
	}
	return out
}

// Three claims of 3 slots hold at once in slots 0, 1, 2; a fourth without
// Wait is told who holds, and with Wait queues and blocks until a slot is
// freed, then takes that slot. Freed slots are reused lowest first, and
// fences rise strictly across slots (M1, S1, S4).
func testSlotsAdmitN(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	other := b.openSecond(t, desc)
	ls := b.takeSlots(t, s, "n", 3)
	if h := busy(t, other, "n", b.slotClaim("fourth", 3)); h.Kind != store.KindSlot || h.Slots != 3 || !slices.Contains(fencesOf(ls...), h.Fence) {
		t.Errorf("a fourth claim of 3 slots is told of %+v; want one of the slot holders", h)
	}
	fourth := waitAsync(t, other, "n", b.slotClaim("fourth", 3), guard)
	st := waitWaiters(t, s, "n", 1)
	if w := st.Waiters[0]; w.Kind != store.KindSlot || w.Slots != 3 || w.Slot != nil || w.Name != "fourth" {
		t.Errorf("the waiter is %s; want fourth, waiting for one of 3 slots, with no slot", describeHolders(st.Waiters))
	}
	pending(t, fourth, "a fourth holder of 3 slots")
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		_, _, err := s.Acquire(ctx, "n", b.slotClaim("fifth", 3))
		gaveUp <- err
	}()
	waitWaiters(t, s, "n", 2)
	cancel()
	if err := testsupport.RecvWithin(t, gaveUp, guard, "the cancelled fifth claim to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait for a slot = %v, want context.Canceled", err)
	}
	if st := status(t, s, "n"); len(st.Waiters) != 1 || st.Waiters[0].Name != "fourth" {
		t.Errorf("waiters after a cancelled wait: %s; want only fourth", describeHolders(st.Waiters))
	}
	release(t, ls[1])
	l4 := recv(t, fourth, "the fourth to take the freed slot")
	if l4.Slot() != 1 {
		t.Errorf("the fourth took slot %d, want the freed slot 1", l4.Slot())
	}
	lost(t, ls[1]) // released, and its slot taken by another
	renews(t, ls[0], ls[2], l4)
	// Two slots free: the lowest is taken first.
	release(t, ls[2])
	release(t, ls[0])
	a := acquire(t, s, "n", b.slotClaim("a", 3))
	c := acquire(t, s, "n", b.slotClaim("c", 3))
	if a.Slot() != 0 || c.Slot() != 2 {
		t.Errorf("with slots 0 and 2 free the next two took %d and %d; want 0 then 2", a.Slot(), c.Slot())
	}
	rising(t, append(fencesOf(ls...), l4.Fence(), a.Fence(), c.Fence())...)
	releaseAll(t, l4, a, c)
	if st := status(t, s, "n"); st.State != store.Free || len(st.Holders) != 0 {
		t.Errorf("status after every slot was released: %+v, holders %s", st, describeHolders(st.Holders))
	}
}

// checkSlotHolders fails unless Holders are the leases, one per slot,
// sorted by slot, each of kind slot with its fence, pid and name, and
// Holder is nil (M3).
func checkSlotHolders(t *testing.T, st *store.Status, n int, ls ...store.Lease) {
	t.Helper()
	if st.State != store.Held || st.Holder != nil || len(st.Holders) != len(ls) {
		t.Fatalf("status of %d slot holders: state %s, holder %+v, holders %s", len(ls), st.State, st.Holder, describeHolders(st.Holders))
	}
	for i, h := range st.Holders {
		l := ls[i]
		if h.Kind != store.KindSlot || h.Slot == nil || *h.Slot != l.Slot() || h.Slots != n || h.Fence != l.Fence() ||
			h.PID != os.Getpid() || h.Name != fmt.Sprint("slot", l.Slot()) || !h.Expires.After(h.Acquired) {
			t.Errorf("holder %d is %s; want slot %d of %d at fence %d, sorted by slot", i, describeHolders([]store.Holder{h}), l.Slot(), n, l.Fence())
		}
	}
}

// Status and List show every slot holder in Holders, sorted by slot, and
// no Holder; the waiters with their kind; Prune leaves them all held. An
// exclusive hold keeps Holder and is listed in Holders too; shared
// holders are listed by fence (M3).
func testSlotsStatus(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	ls := b.takeSlots(t, s, "st", 3)
	tick := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := ls[1].Tick(t.Context(), tick); err != nil {
		t.Fatalf("Tick of slot 1: %v", err)
	}
	release(t, ls[1])
	checkSlotHolders(t, status(t, s, "st"), 3, ls[0], ls[2])
	ls[1] = acquire(t, s, "st", b.slotClaim("slot1", 3))
	if h := status(t, s, "st").Holders[1]; !h.LastTick.IsZero() {
		t.Errorf("the next holder of slot 1 shows the last tick %v of the one before", h.LastTick)
	}
	if err := ls[1].Tick(t.Context(), tick); err != nil {
		t.Fatalf("Tick of slot 1: %v", err)
	}
	w := waitAsync(t, s, "st", b.slotClaim("waiter", 3), guard)
	st := waitWaiters(t, s, "st", 1)
	checkSlotHolders(t, st, 3, ls...)
	for i, h := range st.Holders {
		if h.LastTick.Equal(tick) != (i == 1) {
			t.Errorf("holder %d's last tick is %v; want %v for slot 1 only", i, h.LastTick, tick)
		}
	}
	if w := st.Waiters[0]; w.Kind != store.KindSlot || w.Slots != 3 || w.Name != "waiter" {
		t.Errorf("waiters %s; want the waiter for 3 slots", describeHolders(st.Waiters))
	}
	list, err := b.openSecond(t, desc).List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if i := slices.IndexFunc(list, func(e store.Status) bool { return e.Key == "st" }); i < 0 {
		t.Errorf("List lacks the key: %+v", list)
	} else {
		checkSlotHolders(t, &list[i], 3, ls...)
	}
	if _, err := s.Prune(t.Context()); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	checkSlotHolders(t, status(t, s, "st"), 3, ls...)
	renews(t, ls...)
	release(t, ls[0])
	releaseAll(t, recv(t, w, "the waiter"), ls[1], ls[2])

	x := acquire(t, s, "x", b.claim("x"))
	xw := waitAsync(t, s, "x", b.claim("xw"), guard)
	st = waitWaiters(t, s, "x", 1)
	if st.Holder == nil || st.Holder.Fence != x.Fence() || st.Holder.Kind != store.KindExclusive || len(st.Holders) != 1 ||
		st.Holders[0].Fence != x.Fence() || st.Holders[0].Kind != store.KindExclusive || st.Holders[0].Slot != nil || x.Slot() != 0 {
		t.Errorf("status of an exclusive hold (lease slot %d): holder %+v, holders %s; want it as Holder and the one of Holders", x.Slot(), st.Holder, describeHolders(st.Holders))
	}
	if st.Waiters[0].Kind != store.KindExclusive {
		t.Errorf("waiters %s; want an exclusive one", describeHolders(st.Waiters))
	}
	release(t, x)
	release(t, recv(t, xw, "the exclusive waiter"))

	sh := []store.Lease{acquire(t, s, "sh", b.sharedClaim("s0")), acquire(t, s, "sh", b.sharedClaim("s1"))}
	st = status(t, s, "sh")
	if st.State != store.Held || st.Holder != nil || len(st.Holders) != 2 {
		t.Fatalf("status of two shared holders: %+v, holders %s", st, describeHolders(st.Holders))
	}
	for i, h := range st.Holders {
		if h.Kind != store.KindShared || h.Slot != nil || h.Fence != sh[i].Fence() || h.PID != os.Getpid() || sh[i].Slot() != -1 {
			t.Errorf("shared holder %d is %s (lease slot %d); want kind shared at fence %d, by fence, lease slot -1", i, describeHolders([]store.Holder{h}), sh[i].Slot(), sh[i].Fence())
		}
	}
	releaseAll(t, sh...)
}

// A claim whose kind or slot count differs from the key's holders' and
// waiters' fails with ErrSlots naming both, waiting or not, and joins no
// queue; a slot claim meets the same beside exclusive or shared holders
// (M1). Exclusive beside shared, and --slots 1 beside exclusive, is
// contention, not a mismatch.
func testSlotsMismatch(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	ls := b.takeSlots(t, s, "m", 3)
	w := waitAsync(t, s, "m", b.slotClaim("waiter", 3), guard)
	waitWaiters(t, s, "m", 1)
	one := b.claim("one")
	one.Slots = 1
	for _, c := range []struct {
		claim store.Claim
		asks  string
	}{{b.slotClaim("two", 2), "--slots 2"}, {b.claim("exclusive"), "exclusive"}, {one, "exclusive"}, {b.sharedClaim("shared"), "shared"}} {
		for _, wait := range []bool{false, true} {
			c.claim.Wait = wait
			mismatch(t, s, "m", c.claim, "--slots 3", c.asks)
		}
	}
	if st := status(t, s, "m"); len(st.Waiters) != 1 || len(st.Holders) != 3 {
		t.Errorf("after refused claims: holders %s, waiters %s; want the 3 holders and the one waiter", describeHolders(st.Holders), describeHolders(st.Waiters))
	}
	release(t, ls[0])
	releaseAll(t, recv(t, w, "the waiter of 3 slots"), ls[1], ls[2])

	x := acquire(t, s, "mx", b.claim("x"))
	mismatch(t, s, "mx", b.slotClaim("three", 3), "exclusive", "--slots 3")
	if h := busy(t, s, "mx", one); h.Fence != x.Fence() {
		t.Errorf("a claim of 1 slot beside an exclusive holder is told of %+v; want the holder", h)
	}
	release(t, x)
	sh := acquire(t, s, "ms", b.sharedClaim("s"))
	mismatch(t, s, "ms", b.slotClaim("three", 3), "shared", "--slots 3")
	if h := busy(t, s, "ms", b.claim("x")); h.Kind != store.KindShared || h.Fence != sh.Fence() {
		t.Errorf("an exclusive claim beside a shared holder is told of %+v; want the shared holder", h)
	}
	release(t, sh)
}

// mismatch fails unless acquiring key with c fails with ErrSlots at once,
// its message naming has and asks.
func mismatch(t *testing.T, s store.Store, key string, c store.Claim, has, asks string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), guard)
	defer cancel()
	l, h, err := s.Acquire(ctx, key, c)
	if l != nil {
		l.Release(t.Context())
	}
	if !errors.Is(err, store.ErrSlots) || l != nil {
		t.Errorf("Acquire(%q) asking for %s (wait %v) beside %s = %v, holder %+v, %v; want ErrSlots", key, asks, c.Wait, has, l, h, err)
		return
	}
	if msg := err.Error(); !strings.Contains(msg, has) || !strings.Contains(msg, asks) {
		t.Errorf("the mismatch error %q does not name both %q and %q", msg, has, asks)
	}
}

// Waiters of a slot key are served in arrival order, each in the slot
// freed for it (S10, M1).
func testSlotsFIFO(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	other := b.openSecond(t, desc)
	ls := b.takeSlots(t, s, "q", 2)
	w1 := waitAsync(t, other, "q", b.slotClaim("w1", 2), guard)
	waitWaiters(t, s, "q", 1)
	w2 := waitAsync(t, s, "q", b.slotClaim("w2", 2), guard)
	waitWaiters(t, s, "q", 2)
	w3 := waitAsync(t, other, "q", b.slotClaim("w3", 2), guard)
	st := waitWaiters(t, s, "q", 3)
	if w := st.Waiters; w[0].Name != "w1" || w[1].Name != "w2" || w[2].Name != "w3" {
		t.Errorf("waiters %s; want w1, w2, w3 in arrival order", describeHolders(w))
	}
	release(t, ls[1])
	l1 := recv(t, w1, "the first waiter")
	if st := status(t, s, "q"); len(st.Waiters) != 2 || st.Waiters[0].Name != "w2" {
		t.Errorf("after w1 took a slot: waiters %s; want w2, w3", describeHolders(st.Waiters))
	}
	pending(t, w2, "the second waiter while both slots are held")
	release(t, ls[0])
	l2 := recv(t, w2, "the second waiter")
	pending(t, w3, "the third waiter while both slots are held")
	if l1.Slot() != 1 || l2.Slot() != 0 {
		t.Errorf("w1 took slot %d, w2 slot %d; want the slots freed for each, 1 then 0", l1.Slot(), l2.Slot())
	}
	release(t, l1)
	l3 := recv(t, w3, "the third waiter")
	rising(t, ls[0].Fence(), ls[1].Fence(), l1.Fence(), l2.Fence(), l3.Fence())
	releaseAll(t, l2, l3)
}

// A claim without Wait takes a free slot, also just after a waiter that
// waited for any of several slots took one: what it waited with on the
// others must not make a freed slot look held (M1: contention is a
// holder, and a freed slot is reused lowest first). Repeated, as such a
// moment may be short.
func testSlotsNoPhantomBusy(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	for i := range 50 {
		key := fmt.Sprint("ph", i)
		ls := b.takeSlots(t, s, key, 2)
		w := waitAsync(t, s, key, b.slotClaim("waiter", 2), guard)
		waitWaiters(t, s, key, 1)
		release(t, ls[1])
		lw := recv(t, w, "the waiter")
		release(t, ls[0])
		c := b.slotClaim("next", 2)
		c.Wait = false
		l, h, err := s.Acquire(t.Context(), key, c)
		if err != nil || l == nil {
			t.Fatalf("round %d: a claim without wait, with slot 0 free = %v, holder %+v, %v; want slot 0", i, l, h, err)
		}
		if l.Slot() != 0 {
			t.Errorf("round %d: with slot 0 free a claim took slot %d", i, l.Slot())
		}
		releaseAll(t, l, lw)
	}
}

// A dead waiter of a slot key loses its place: the one behind it takes the
// next freed slot (S10 per slot).
func testSlotsDeadWaiter(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	ls := b.takeSlots(t, s, "w", 2)
	dead := b.spawnKind(t, desc, "w", "", 2, false)
	waitWaiters(t, s, "w", 1)
	second := waitAsync(t, s, "w", b.slotClaim("second", 2), b.deadWithin())
	waitWaiters(t, s, "w", 2)
	dead.Kill()
	release(t, ls[0])
	l := testsupport.RecvWithin(t, second, b.deadWithin(), "the waiter behind a dead one to take the freed slot")
	if l == nil {
		t.FailNow()
	}
	if l.Slot() != 0 {
		t.Errorf("the waiter took slot %d, want the freed slot 0", l.Slot())
	}
	releaseAll(t, l, ls[1])
}

// Prune leaves a free slot key such that slots are handed out from 0
// again, and its fences still rise.
func testSlotsPrune(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	first := b.takeSlots(t, s, "p", 3)
	releaseAll(t, first...)
	if _, err := s.Prune(t.Context()); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	again := b.takeSlots(t, s, "p", 3)
	rising(t, append(fencesOf(first...), fencesOf(again...)...)...)
	releaseAll(t, again...)
}

// A free key takes a claim of any kind, whatever kind held it before: no
// kind or slot count outlives its holders (M1, M2).
func testKindsChangeOnceFree(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	held := b.takeSlots(t, s, "k", 3)
	releaseAll(t, held...)
	fences := fencesOf(held...)
	for _, c := range []store.Claim{b.claim("exclusive"), b.sharedClaim("shared"), b.slotClaim("two", 2), b.slotClaim("four", 4)} {
		c.Wait = false
		l, h, err := s.Acquire(t.Context(), "k", c)
		if err != nil || l == nil {
			t.Fatalf("Acquire(%s) of a free key = %v, holder %+v, %v", c.Name, l, h, err)
		}
		kind, n := store.KindOf(c)
		if st := status(t, s, "k"); len(st.Holders) != 1 || st.Holders[0].Kind != kind || kind == store.KindSlot && st.Holders[0].Slots != n {
			t.Errorf("holders %s; want one %s of %d", describeHolders(st.Holders), kind, n)
		}
		fences = append(fences, l.Fence())
		release(t, l)
	}
	rising(t, fences...)
}
