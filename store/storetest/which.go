package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// Revoke of one slot breaks only that holder: it hears of it, its renewal
// fails with ErrLost, the others renew; its slot goes to the waiter.
// A Which that picks nobody reports false; the zero Which revokes every
// holder (M3, S5).
func testRevokeOneSlot(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	ls := b.takeSlots(t, s, "r", 3)
	for _, l := range ls {
		drain(l.Changes())
	}
	other := b.openSecond(t, desc)
	waiter := waitAsync(t, other, "r", b.slotClaim("next", 3), guard)
	waitWaiters(t, s, "r", 1)
	one, seven := 1, 7
	if ok, err := other.Revoke(t.Context(), "r", store.Which{Slot: &one}); !ok || err != nil {
		t.Fatalf("Revoke of slot 1 = %v, %v", ok, err)
	}
	testsupport.RecvWithin(t, ls[1].Changes(), guard, "Changes of slot 1 after its revocation")
	lost(t, ls[1])
	renews(t, ls[0], ls[2])
	requested(t, ls[0], store.RequestNone)
	requested(t, ls[2], store.RequestNone)
	if ok, err := other.Revoke(t.Context(), "r", store.Which{Slot: &seven}); ok || err != nil {
		t.Errorf("Revoke of slot 7, which nobody holds = %v, %v; want false, nil", ok, err)
	}
	release(t, ls[1])
	next := recv(t, waiter, "the waiter, once slot 1 was revoked and released")
	if next.Slot() != 1 {
		t.Errorf("after slot 1 was revoked and released the waiter took slot %d", next.Slot())
	}
	renews(t, ls[0], next, ls[2]) // the revocation was of the holding, not of the slot
	rising(t, append(fencesOf(ls...), next.Fence())...)
	if ok, err := other.Revoke(t.Context(), "r", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke of every holder = %v, %v", ok, err)
	}
	for _, l := range []store.Lease{ls[0], next, ls[2]} {
		lost(t, l)
		release(t, l)
	}
	if ok, err := other.Revoke(t.Context(), "r", store.Which{}); ok || err != nil {
		t.Errorf("Revoke of a free slot key = %v, %v; want false, nil", ok, err)
	}
	first := acquire(t, s, "r", b.slotClaim("slot0", 3))
	if first.Slot() != 0 {
		t.Errorf("after every holder was revoked the next took slot %d, want 0", first.Slot())
	}
	release(t, first)
}

// Revoke by pid breaks the holders of that fencerun only: another
// process's holder, then this process's two, while the other stays held
// (M3). The in-process leases share this process's pid.
func testRevokeByPID(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	a := acquire(t, s, "p", b.slotClaim("slot0", 3))
	p := b.spawnKind(t, desc, "p", "", 3, false)
	if _, slot := p.acquiredSlot(guard); slot != 1 {
		t.Errorf("the helper took slot %d, want 1", slot)
	}
	c := acquire(t, s, "p", b.slotClaim("slot2", 3))
	st := status(t, s, "p")
	if len(st.Holders) != 3 || st.Holders[1].PID != p.Pid() {
		t.Fatalf("holders %s; want the helper (pid %d) in slot 1", describeHolders(st.Holders), p.Pid())
	}
	if ok, err := s.Revoke(t.Context(), "p", store.Which{PID: p.Pid()}); !ok || err != nil {
		t.Fatalf("Revoke of pid %d = %v, %v", p.Pid(), ok, err)
	}
	p.Expect("lost")
	renews(t, a, c)
	q := b.spawnKind(t, desc, "p", "", 3, false)
	if _, slot := q.acquiredSlot(guard); slot != 1 {
		t.Errorf("the next helper took slot %d, want the freed 1", slot)
	}
	if ok, err := s.Revoke(t.Context(), "p", store.Which{PID: os.Getpid()}); !ok || err != nil {
		t.Fatalf("Revoke of this process's pid = %v, %v", ok, err)
	}
	lost(t, a)
	lost(t, c)
	q.renewed()
	releaseAll(t, a, c)
	q.release()
	if ok, err := s.Revoke(t.Context(), "p", store.Which{PID: p.Pid()}); ok || err != nil {
		t.Errorf("Revoke of a pid that holds nothing = %v, %v; want false, nil", ok, err)
	}
}

// Revoke and Cancel act on holders, never on waiters: a Which that picks
// only a waiter's pid picks nobody, and cancelling and revoking every
// holder leaves the waiters queued, to take the key in turn with nothing
// asked of them (M3, S10).
func testRevokeSparesWaiters(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	ls := b.takeSlots(t, s, "rw", 2)
	p := b.spawnKind(t, desc, "rw", "", 2, false)
	waitWaiters(t, s, "rw", 1)
	w := waitAsync(t, s, "rw", b.slotClaim("waiter", 2), guard)
	waitWaiters(t, s, "rw", 2)
	if ok, err := s.Revoke(t.Context(), "rw", store.Which{PID: p.Pid()}); ok || err != nil {
		t.Errorf("Revoke of a waiter's pid = %v, %v; want false: it holds nothing", ok, err)
	}
	if ok, err := s.Cancel(t.Context(), "rw", store.Which{PID: p.Pid()}); ok || err != nil {
		t.Errorf("Cancel of a waiter's pid = %v, %v; want false: it holds nothing", ok, err)
	}
	renews(t, ls...)
	if ok, err := s.Cancel(t.Context(), "rw", store.Which{}); !ok || err != nil {
		t.Fatalf("Cancel of every holder = %v, %v", ok, err)
	}
	if ok, err := s.Revoke(t.Context(), "rw", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke of every holder = %v, %v", ok, err)
	}
	releaseAll(t, ls...)
	// Both are admitted at once (on etcd the revocation frees both slots
	// together): which of them takes the lower slot is not said.
	_, slot := p.acquiredSlot(guard)
	l := recv(t, w, "the second waiter, still queued after every holder was revoked")
	if slot == l.Slot() || min(slot, l.Slot()) != 0 || max(slot, l.Slot()) != 1 {
		t.Errorf("the waiters took slots %d and %d; want 0 and 1", slot, l.Slot())
	}
	requested(t, l, store.RequestNone) // the cancel was of the holders before
	p.renewed()
	renews(t, l)
	release(t, l)
	p.release()
}

// Cancel asks only the holder a Which picks, by slot or by pid; the
// zero Which asks every holder; a cancel request keeps the lease (M3).
func testCancelWhich(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	ls := b.takeSlots(t, s, "c", 3)
	for _, l := range ls {
		drain(l.Changes())
	}
	two, five := 2, 5
	if ok, err := s.Cancel(t.Context(), "c", store.Which{Slot: &two}); !ok || err != nil {
		t.Fatalf("Cancel of slot 2 = %v, %v", ok, err)
	}
	testsupport.RecvWithin(t, ls[2].Changes(), guard, "Changes of slot 2 after a cancel request")
	requested(t, ls[2], store.RequestCancel)
	requested(t, ls[0], store.RequestNone)
	requested(t, ls[1], store.RequestNone)
	st := status(t, s, "c")
	for i, h := range st.Holders {
		if h.Cancel != (i == 2) {
			t.Errorf("after a cancel of slot 2, holders %s: want only slot 2 asked", describeHolders(st.Holders))
			break
		}
	}
	if ok, err := s.Cancel(t.Context(), "c", store.Which{Slot: &five}); ok || err != nil {
		t.Errorf("Cancel of slot 5, which nobody holds = %v, %v; want false, nil", ok, err)
	}
	renews(t, ls...)
	releaseAll(t, ls...)
	// The request was for those holders, not for the next in their slots.
	ls = b.takeSlots(t, s, "c", 3)
	for _, l := range ls {
		requested(t, l, store.RequestNone)
	}
	releaseAll(t, ls...)

	a := acquire(t, s, "cs", b.sharedClaim("a"))
	drain(a.Changes())
	p := b.spawnKind(t, desc, "cs", "", 0, true)
	p.acquired(guard)
	if ok, err := s.Cancel(t.Context(), "cs", store.Which{PID: p.Pid()}); !ok || err != nil {
		t.Fatalf("Cancel of pid %d = %v, %v", p.Pid(), ok, err)
	}
	p.Expect("cancel requested")
	requested(t, a, store.RequestNone)
	zero := 0
	if ok, err := s.Cancel(t.Context(), "cs", store.Which{Slot: &zero}); ok || err != nil {
		t.Errorf("Cancel of slot 0 of shared holders, which have no slot = %v, %v; want false, nil", ok, err)
	}
	if ok, err := s.Revoke(t.Context(), "cs", store.Which{Slot: &zero}); ok || err != nil {
		t.Errorf("Revoke of slot 0 of shared holders, which have no slot = %v, %v; want false, nil", ok, err)
	}
	renews(t, a)
	requested(t, a, store.RequestNone)
	if ok, err := s.Cancel(t.Context(), "cs", store.Which{}); !ok || err != nil {
		t.Fatalf("Cancel of every holder = %v, %v", ok, err)
	}
	testsupport.RecvWithin(t, a.Changes(), guard, "Changes after a cancel of every holder")
	requested(t, a, store.RequestCancel)
	p.renewed()
	release(t, a)
	p.release()
}

// A holder of a slot that dies frees only its slot: the other holder
// renews on, and whoever takes the dead one's slot next gets its
// leftovers as Predecessor, passed on with the slot until confirmed
// stopped (M3, S2).
func testDeadSlotHolder(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	const marker = "STORETEST_TREE=dead-slot-holder"
	dead := b.spawnKind(t, desc, "d", marker, 2, false)
	deadFence, slot := dead.acquiredSlot(guard)
	if slot != 0 {
		t.Fatalf("the helper took slot %d, want 0", slot)
	}
	live := acquire(t, s, "d", b.slotClaim("live", 2))
	stop := b.keepRenewed(t, live) // through DeadAfter, longer than a TTL
	deadPID := dead.Pid()
	dead.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), b.deadWithin())
	defer cancel()
	next, _, err := s.Acquire(ctx, "d", b.slotClaim("next", 2))
	if err != nil || next == nil {
		t.Fatalf("Acquire after the slot's holder died: %v", err)
	}
	p := next.Predecessor()
	if next.Slot() != 0 || p == nil || p.PID != deadPID || p.Fence != deadFence || !slices.Contains(leftovers(p), marker) {
		t.Errorf("the next holder has slot %d, predecessor %+v; want slot 0 and the dead holder pid %d, fence %d, leftovers with %q", next.Slot(), p, deadPID, deadFence, marker)
	}
	if live.Predecessor() != nil {
		t.Errorf("the live holder has a predecessor %+v", live.Predecessor())
	}
	stop()
	renews(t, live)
	requested(t, live, store.RequestNone)
	release(t, next)
	again := acquire(t, s, "d", b.slotClaim("again", 2))
	if p := again.Predecessor(); again.Slot() != 0 || p == nil || !slices.Contains(leftovers(p), marker) {
		t.Errorf("slot %d, predecessor %+v after a holder that did not confirm the leftovers stopped: want slot 0 with them passed on", again.Slot(), p)
	}
	if err := again.LeftoversStopped(t.Context()); err != nil {
		t.Fatalf("LeftoversStopped: %v", err)
	}
	release(t, again)
	last := acquire(t, s, "d", b.slotClaim("last", 2))
	if p := last.Predecessor(); p != nil {
		t.Errorf("predecessor %+v after the leftovers were confirmed stopped", p)
	}
	releaseAll(t, last, live)
}

// A holder of a slot that dies while a claim waits for a slot hands the
// waiter its slot and its leftovers; Status lists the live holders only
// once DeadAfter passed, and Prune keeps them held (M3, S2, S10).
func testDeadSlotHolderWakesWaiter(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	const marker = "STORETEST_TREE=dead-middle-slot"
	first := acquire(t, s, "dw", b.slotClaim("slot0", 3))
	dead := b.spawnKind(t, desc, "dw", marker, 3, false)
	if _, slot := dead.acquiredSlot(guard); slot != 1 {
		t.Fatalf("the helper took slot %d, want 1", slot)
	}
	third := acquire(t, s, "dw", b.slotClaim("slot2", 3))
	stop := b.keepRenewed(t, first, third) // through DeadAfter, longer than a TTL
	w := waitAsync(t, s, "dw", b.slotClaim("waiter", 3), b.deadWithin())
	waitWaiters(t, s, "dw", 1)
	deadPID := dead.Pid()
	dead.Kill()
	l := testsupport.RecvWithin(t, w, b.deadWithin(), "the waiter to take the dead holder's slot")
	if l == nil {
		t.FailNow()
	}
	if p := l.Predecessor(); l.Slot() != 1 || p == nil || p.PID != deadPID || !slices.Contains(leftovers(p), marker) {
		t.Errorf("the waiter took slot %d with predecessor %+v; want slot 1 and the dead holder pid %d's leftovers", l.Slot(), p, deadPID)
	}
	stop()
	release(t, l)
	checkSlotHolders(t, status(t, s, "dw"), 3, first, third)
	if _, err := s.Prune(t.Context()); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	checkSlotHolders(t, status(t, s, "dw"), 3, first, third)
	renews(t, first, third)
	again := acquire(t, s, "dw", b.slotClaim("slot1", 3))
	if again.Slot() != 1 {
		t.Errorf("after Prune the free slot 1 was taken as %d", again.Slot())
	}
	renews(t, first, third)
	releaseAll(t, again, first, third)
}

// Each dead slot holder's leftovers go to the next taker of its slot,
// and to every later one until confirmed stopped (S2, M3). A backend may
// hand a taker more (every dead holder's); the suite checks that none is
// missed.
func testLeftoversPerSlot(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	markers := []string{"STORETEST_TREE=dead-in-slot-0", "STORETEST_TREE=dead-in-slot-1"}
	b.killSlotHolders(t, desc, "ls", 2, markers)
	var ls []store.Lease
	for i, m := range markers {
		l := b.acquireAfterDeath(t, s, "ls", b.slotClaim(fmt.Sprint("slot", i), 2))
		if p := l.Predecessor(); l.Slot() != i || p == nil || !slices.Contains(leftovers(p), m) {
			t.Errorf("the taker of slot %d (took %d) has predecessor %+v; want the leftovers of slot %d's dead holder, %q", i, l.Slot(), p, i, m)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		if err := l.LeftoversStopped(t.Context()); err != nil {
			t.Fatalf("LeftoversStopped: %v", err)
		}
	}
	releaseAll(t, ls...)
	for i := range 2 {
		l := acquire(t, s, "ls", b.slotClaim(fmt.Sprint("slot", i), 2))
		if p := l.Predecessor(); p != nil {
			t.Errorf("slot %d's taker has predecessor %+v after every slot's leftovers were confirmed stopped", l.Slot(), p)
		}
		defer release(t, l)
	}
}

// An exclusive holder runs alone, so it inherits the leftovers of a
// shared holder that died, even after a live shared holder released
// (M3, S2).
func testDeadSharedHolder(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	const marker = "STORETEST_TREE=dead-shared-holder"
	dead := b.spawnKind(t, desc, "ds", marker, 0, true)
	deadFence := dead.acquired(guard)
	live := acquire(t, s, "ds", b.sharedClaim("live"))
	deadPID := dead.Pid()
	dead.Kill()
	renews(t, live)
	release(t, live)
	ctx, cancel := context.WithTimeout(t.Context(), b.deadWithin())
	defer cancel()
	x, _, err := s.Acquire(ctx, "ds", b.claim("x"))
	if err != nil || x == nil {
		t.Fatalf("Acquire after the shared holder died: %v", err)
	}
	if p := x.Predecessor(); p == nil || !slices.Contains(leftovers(p), marker) {
		t.Errorf("the exclusive holder's predecessor %+v; want the leftovers of the dead shared holder pid %d, fence %d, with %q", p, deadPID, deadFence, marker)
	}
	release(t, x)
}

// An exclusive holder inherits the leftovers of every slot holder that
// died, each in a slot of its own; so does a shared one, which never runs
// beside a slot holder's tree, whatever slot it happens to use (M2, M3,
// S2).
func testDeadSlotHolders(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	for _, c := range []store.Claim{b.claim("exclusive"), b.sharedClaim("shared")} {
		key := "dx-" + c.Name
		markers := []string{"STORETEST_TREE=dead-slot-0-" + c.Name, "STORETEST_TREE=dead-slot-1-" + c.Name, "STORETEST_TREE=dead-slot-2-" + c.Name}
		b.killSlotHolders(t, desc, key, 3, markers)
		l := b.acquireAfterDeath(t, s, key, c)
		p := l.Predecessor()
		for _, m := range markers {
			if p == nil || !slices.Contains(leftovers(p), m) {
				t.Errorf("the %s holder's predecessor %+v; want leftovers with %q", c.Name, p, m)
			}
		}
		release(t, l)
	}
}

// The leftovers of an exclusive holder that died go to whoever takes the
// key next, whatever its kind: a slot holder in slot 0, a shared holder
// (S2, M3); and, until that one confirms them stopped, to every holder
// that takes a slot beside it, which must not start its command beside
// them either (S1, M2). Once confirmed, they are nobody's.
func testDeadExclusive(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	for _, c := range []store.Claim{b.slotClaim("slot", 2), b.sharedClaim("shared")} {
		key := "de-" + c.Name
		marker := "STORETEST_TREE=dead-exclusive-before-" + c.Name
		dead := b.spawn(t, desc, key, marker)
		dead.acquired(guard)
		dead.Kill()
		l := b.acquireAfterDeath(t, s, key, c)
		slot := 0
		if c.Shared {
			slot = -1
		}
		if p := l.Predecessor(); p == nil || !slices.Contains(leftovers(p), marker) || l.Slot() != slot {
			t.Errorf("the %s taker after a dead exclusive holder has slot %d, predecessor %+v; want slot %d, leftovers with %q", c.Name, l.Slot(), p, slot, marker)
		}
		beside := acquire(t, s, key, c)
		if p := beside.Predecessor(); p == nil || !slices.Contains(leftovers(p), marker) {
			t.Errorf("the %s holder beside one that has not confirmed a dead exclusive holder's leftovers stopped has predecessor %+v; want them too, %q", c.Name, p, marker)
		}
		for _, l := range []store.Lease{l, beside} {
			if err := l.LeftoversStopped(t.Context()); err != nil {
				t.Fatalf("LeftoversStopped: %v", err)
			}
		}
		release(t, beside)
		again := acquire(t, s, key, c)
		if p := again.Predecessor(); p != nil {
			t.Errorf("the %s holder beside one that confirmed the leftovers stopped has predecessor %+v", c.Name, p)
		}
		releaseAll(t, l, again)
	}
}

// acquireAfterDeath acquires key for c after its holders died. Until
// DeadAfter has passed a dead holder may still count as one, so a claim
// of another kind may meet ErrSlots until then; where DeadAfter is 0 it
// never may.
func (b *Backend) acquireAfterDeath(t *testing.T, s store.Store, key string, c store.Claim) store.Lease {
	t.Helper()
	deadline := time.Now().Add(b.deadWithin())
	for {
		ctx, cancel := context.WithDeadline(t.Context(), deadline)
		l, _, err := s.Acquire(ctx, key, c)
		cancel()
		switch {
		case err == nil && l != nil:
			return l
		case errors.Is(err, store.ErrSlots) && b.DeadAfter > 0 && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("Acquire(%q, %s) after its holders died = %v, %v", key, c.Name, l, err)
		}
	}
}

// History records each holding's slot; an exclusive or shared holding has
// none (N2, M1).
func testHistorySlots(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	a := acquire(t, s, "h", b.slotClaim("a", 2))
	bl := acquire(t, s, "h", b.slotClaim("b", 2))
	release(t, a)
	c := acquire(t, s, "h", b.slotClaim("c", 2))
	if dropped, err := s.ForgetHistory(t.Context(), "h"); dropped || err != nil {
		t.Errorf("ForgetHistory of a key with slot holders = %v, %v; want false", dropped, err)
	}
	releaseAll(t, bl, c)
	got := history(t, s, "h")
	want := []struct {
		name  string
		fence uint64
		slot  int
	}{{"a", a.Fence(), 0}, {"b", bl.Fence(), 1}, {"c", c.Fence(), 0}}
	if len(got) != len(want) {
		t.Fatalf("history = %s; want %d holdings", describeHistory(got), len(want))
	}
	for i, w := range want {
		if h := got[i]; h.Name != w.name || h.Fence != w.fence || h.Slot == nil || *h.Slot != w.slot {
			t.Errorf("holding %d = %+v (slot %v); want %s, fence %d, slot %d", i, h, h.Slot, w.name, w.fence, w.slot)
		}
	}
	release(t, acquire(t, s, "hx", b.claim("x")))
	if got := history(t, s, "hx"); len(got) != 1 || got[0].Slot != nil {
		t.Errorf("exclusive history = %s; want one holding with no slot", describeHistory(got))
	}
	sa, sb := acquire(t, s, "hs", b.sharedClaim("sa")), acquire(t, s, "hs", b.sharedClaim("sb"))
	releaseAll(t, sa, sb)
	got = history(t, s, "hs")
	if len(got) != 2 || got[0].Slot != nil || got[1].Slot != nil || got[0].Fence != sa.Fence() || got[1].Fence != sb.Fence() {
		t.Errorf("shared history = %s; want sa then sb, each with no slot", describeHistory(got))
	}
}

// Each slot holder marks its --once ID with its own release, conditional
// on its own lease: the others hold on, and a revoked one marks nothing
// (O1, M3).
func testOnceSlots(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	ls := b.takeSlots(t, s, "o", 3)
	if err := ls[0].ReleaseDone(t.Context(), "a"); err != nil {
		t.Fatalf("ReleaseDone of slot 0: %v", err)
	}
	renews(t, ls[1], ls[2])
	one := 1
	if ok, err := s.Revoke(t.Context(), "o", store.Which{Slot: &one}); !ok || err != nil {
		t.Fatalf("Revoke of slot 1 = %v, %v", ok, err)
	}
	if err := ls[1].ReleaseDone(t.Context(), "b"); !errors.Is(err, store.ErrLost) {
		t.Errorf("ReleaseDone of a revoked slot = %v, want ErrLost", err)
	}
	if err := ls[2].ReleaseDone(t.Context(), "c"); err != nil {
		t.Fatalf("ReleaseDone of slot 2: %v", err)
	}
	got := done(t, s, "o")
	if len(got) != 2 || got[0].ID != "c" || got[0].Fence != ls[2].Fence() || got[1].ID != "a" || got[1].Fence != ls[0].Fence() {
		t.Errorf("done = %+v; want c by fence %d, then a by fence %d", got, ls[2].Fence(), ls[0].Fence())
	}
}

// The leftovers of holders that died in slots a later claim can never
// take (a smaller --slots N after a bigger one, once the key is free) go
// to that claim's takers: else they would run beside its N holders for
// good, more than N at once (M1, M3, S2).
func testDeadHoldersBeyondN(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	markers := []string{"STORETEST_TREE=beyond-0", "STORETEST_TREE=beyond-1", "STORETEST_TREE=beyond-2", "STORETEST_TREE=beyond-3"}
	b.killSlotHolders(t, desc, "bn", 4, markers)
	var got []string
	var ls []store.Lease
	for i := range 2 {
		l := b.acquireAfterDeath(t, s, "bn", b.slotClaim(fmt.Sprint("two", i), 2))
		if p := l.Predecessor(); p != nil {
			got = append(got, leftovers(p)...)
		}
		ls = append(ls, l)
	}
	for _, m := range markers {
		if !slices.Contains(got, m) {
			t.Errorf("no taker of --slots 2 got the leftovers %q of a dead --slots 4 holder (got %q): they run beside its holders for good", m, got)
		}
	}
	releaseAll(t, ls...)
}

// killSlotHolders has a helper process take each slot of key in turn, a
// --slots n holder whose tree carries markers[i], and SIGKILLs them all.
func (b *Backend) killSlotHolders(t *testing.T, desc, key string, n int, markers []string) {
	t.Helper()
	var dead []*proc
	for i, m := range markers {
		p := b.spawnKind(t, desc, key, m, n, false)
		if _, slot := p.acquiredSlot(guard); slot != i {
			t.Fatalf("helper %d took slot %d", i, slot)
		}
		dead = append(dead, p)
	}
	for _, p := range dead {
		p.Kill()
	}
}
