// Package storetest is the conformance suite of the store contract: what
// package store's comment says every backend guarantees, checked against a
// fresh store of a backend, with real helper processes for holders and
// waiters that die. A backend's tests run it unchanged:
//
//	func TestMain(m *testing.M) { storetest.Main(m, open) }
//	func TestConformance(t *testing.T) { storetest.Run(t, storetest.Backend{...}) }
//
// It checks only the contract every backend keeps. What one backend adds
// (the file backend never taking from a live holder past its expiry) and
// how it fails on bad state are that backend's own tests.
//
// Many holders of one key (M1-M5: slots, shared holds, Revoke and Cancel
// of one holder) are checked when Backend.Many is set: every S-property
// per holder, the slot and kind rules, FIFO across kinds, and witnesses
// that watch holds from outside the store under contention. Within
// DeadAfter a dead holder may still count as one (an etcd lease
// lingers): the suite allows a claim of another kind ErrSlots until then,
// never where DeadAfter is 0. A mismatch with the waiters alone is not
// checked apart from one with the holders: waiters of a kind wait only
// beside holders of that kind, so no lasting state has one without the
// other.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// Backend is what the suite needs of a backend.
type Backend struct {
	// New returns a fresh, empty store, closed by the test's cleanup, and
	// a description from which Open (passed to Main) opens the same store
	// in a helper process.
	New func(t *testing.T) (store.Store, string)
	// Open opens the store a description names (in this process: a second
	// client, as another fencerun would be).
	Open func(desc string) (store.Store, error)
	// TTL is the lease duration the suite claims with.
	TTL time.Duration
	// DeadAfter is how long after a process died its lease or queue place
	// may linger: 0 where liveness is a kernel lock, the TTL (and the
	// server's expiry sweep) where it is a lease.
	DeadAfter time.Duration
	// Many: the backend holds slots and shared holds (M1-M5); set by each
	// backend once it does. Run adds the cases of many.go then.
	Many bool
}

// guard bounds every wait that should end far sooner; it is a failure guard
// only, never waited out when things work.
const guard = 20 * time.Second

// Run runs the suite.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		f    func(*testing.T, *Backend)
	}{
		{"AcquireContendNoWait", testAcquireContendNoWait},
		{"Term", testTerm},
		{"FIFOWithDeadWaiter", testFIFOWithDeadWaiter},
		{"FencesRise", testFencesRise},
		{"RenewAfterRevokeFailsWithErrLost", testRenewAfterRevoke},
		{"ChangesWithinASecond", testChangesWithinASecond},
		{"Cancel", testCancel},
		{"CancelledWaitLeavesNoEntry", testCancelledWait},
		{"StatusListPruneShapes", testShapes},
		{"LeftoversHandedOn", testLeftoversHandedOn},
		{"OnceMarkedWithTheRelease", testOnceMarkedWithTheRelease},
		{"OnceRevokedMarksNothing", testOnceRevokedMarksNothing},
		{"OnceReopen", testOnceReopen},
		{"OncePruneKeeps", testOncePruneKeeps},
		{"OnceAwaitDone", testOnceAwaitDone},
		{"HistoryKeepsEveryHolding", testHistoryKeepsEveryHolding},
		{"HistoryBound", testHistoryBound},
		{"HistoryPruneKeepsForget", testHistoryPruneKeepsForget},
		{"Close", testClose},
	}
	if b.Many {
		tests = append(tests, manyTests...)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, &b) })
	}
}

func (b *Backend) claim(name string) store.Claim {
	return store.Claim{Name: name, Reason: "conformance", TTL: b.TTL, Wait: true}
}

func (b *Backend) deadWithin() time.Duration { return b.DeadAfter + guard }

func acquire(t *testing.T, s store.Store, key string, c store.Claim) store.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), guard)
	defer cancel()
	l, h, err := s.Acquire(ctx, key, c)
	if err != nil || l == nil {
		t.Fatalf("Acquire(%q) = %v, holder %+v, %v", key, l, h, err)
	}
	return l
}

func release(t *testing.T, l store.Lease) {
	t.Helper()
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release(%q): %v", l.Key(), err)
	}
}

func status(t *testing.T, s store.Store, key string) *store.Status {
	t.Helper()
	st, err := s.Status(t.Context(), key)
	if err != nil {
		t.Fatalf("Status(%q): %v", key, err)
	}
	return st
}

// waitWaiters waits until key has n waiters and returns the status.
func waitWaiters(t *testing.T, s store.Store, key string, n int) *store.Status {
	t.Helper()
	return waitStatus(t, s, key, fmt.Sprintf("%d waiters", n), func(st *store.Status) bool { return len(st.Waiters) == n })
}

// waitStatus polls key's status until ok holds and returns it.
func waitStatus(t *testing.T, s store.Store, key, what string, ok func(*store.Status) bool) *store.Status {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		st := status(t, s, key)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never had %s: %+v", key, what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAsync acquires in a goroutine; the lease arrives on the channel. The
// wait ends with the test at the latest, before the store is closed.
func waitAsync(t *testing.T, s store.Store, key string, c store.Claim, within time.Duration) <-chan store.Lease {
	got := make(chan store.Lease, 1)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		l, _, err := s.Acquire(ctx, key, c)
		if err != nil && t.Context().Err() == nil {
			t.Errorf("waiting Acquire(%q, %s): %v", key, c.Name, err)
		}
		got <- l
	}()
	return got
}

func testAcquireContendNoWait(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	l := acquire(t, s, "k", b.claim("first"))
	if l.Key() != "k" || l.Fence() == 0 || l.Predecessor() != nil {
		t.Errorf("lease: key %q fence %d predecessor %+v", l.Key(), l.Fence(), l.Predecessor())
	}
	busy := b.claim("second")
	busy.Wait = false
	l2, h, err := s.Acquire(t.Context(), "k", busy)
	if err != nil || l2 != nil {
		t.Fatalf("Acquire of a held key without wait = %v, %v; want contention, not an error", l2, err)
	}
	if h == nil || h.Name != "first" || h.Fence != l.Fence() || h.PID != os.Getpid() {
		t.Errorf("contention names %+v, want the holder first at fence %d", h, l.Fence())
	}
	// Another client of the same store sees the same.
	{
		o := b.openSecond(t, desc)
		if l2, h, err := o.Acquire(t.Context(), "k", busy); err != nil || l2 != nil || h == nil || h.Name != "first" {
			t.Errorf("second client: Acquire = %v, %+v, %v; want contention with first", l2, h, err)
		}
	}
	release(t, l)
	l3, _, err := s.Acquire(t.Context(), "k", busy)
	if err != nil || l3 == nil {
		t.Fatalf("Acquire of a released key without wait = %v, %v", l3, err)
	}
	if l3.Fence() <= l.Fence() {
		t.Errorf("fence %d after %d: not rising", l3.Fence(), l.Fence())
	}
	release(t, l3)
}

// openSecond opens a second client on the store desc names, as another
// fencerun would.
func (b *Backend) openSecond(t *testing.T, desc string) store.Store {
	t.Helper()
	o, err := b.Open(desc)
	if err != nil {
		t.Fatalf("Open(%q): %v", desc, err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func testTerm(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	var reads atomic.Int64
	clock := func() time.Duration { return time.Duration(reads.Add(1)) * time.Second }
	c := b.claim("term")
	c.Clock = clock
	l := acquire(t, s, "k", c)
	after := time.Duration(reads.Load()) * time.Second
	term := l.Term()
	if term.Start < time.Second || term.Start > after || term.TTL < b.TTL {
		t.Errorf("acquisition term %+v: want a Start read from the claim's clock during Acquire (1s..%v) and a TTL of at least %v", term, after, b.TTL)
	}
	before := time.Duration(reads.Load()) * time.Second
	renewed, err := l.Renew(t.Context())
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if renewed.Start <= before || renewed.Start > time.Duration(reads.Load())*time.Second || renewed.TTL < b.TTL {
		t.Errorf("renewal term %+v: want a Start read during Renew and a TTL of at least %v", renewed, b.TTL)
	}
	release(t, l)
}

func testFIFOWithDeadWaiter(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	holder := acquire(t, s, "q", b.claim("holder"))
	dead := b.spawn(t, desc, "q", "")
	waitWaiters(t, s, "q", 1)
	second := waitAsync(t, s, "q", b.claim("second"), b.deadWithin())
	waitWaiters(t, s, "q", 2)
	dead.Kill()
	third := b.spawn(t, desc, "q", "")
	waitStatus(t, s, "q", "the third waiter last", func(st *store.Status) bool {
		n := len(st.Waiters)
		return n >= 2 && st.Waiters[n-1].PID == third.Pid() && st.Waiters[n-2].Name == "second"
	})
	release(t, holder)
	l := testsupport.RecvWithin(t, second, b.deadWithin(), "the second waiter to acquire, before the third and in place of the dead one")
	if l == nil {
		t.FailNow()
	}
	if l.Fence() <= holder.Fence() {
		t.Errorf("fence %d after %d", l.Fence(), holder.Fence())
	}
	if line, said := third.Said(); said {
		t.Fatalf("the third waiter said %q while the second holds", line)
	}
	release(t, l)
	if f := third.acquired(guard); f <= l.Fence() {
		t.Errorf("third fence %d after %d", f, l.Fence())
	}
	third.release()
}

func testFencesRise(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	var fences []uint64
	take := func(name string) store.Lease {
		l := acquire(t, s, "f", b.claim(name))
		fences = append(fences, l.Fence())
		return l
	}
	release(t, take("plain"))
	l := take("revoked")
	if ok, err := s.Revoke(t.Context(), "f", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	release(t, l)
	release(t, take("after revoke"))
	h := b.spawn(t, desc, "f", "")
	fences = append(fences, h.acquired(guard))
	h.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), b.deadWithin())
	defer cancel()
	after, _, err := s.Acquire(ctx, "f", b.claim("after death"))
	if err != nil || after == nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	fences = append(fences, after.Fence())
	release(t, after)
	// Whatever Prune clears of a free key (the file backend removes its
	// state), the key's next fence still rises.
	if _, err := s.Prune(t.Context()); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	release(t, take("after prune"))
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences %v do not strictly rise", fences)
		}
	}
}

func testRenewAfterRevoke(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	l := acquire(t, s, "r", b.claim("revoked"))
	if ok, err := s.Revoke(t.Context(), "r", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if _, err := l.Renew(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Renew after Revoke = %v, want ErrLost", err)
	}
	if _, err := l.Check(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Check after Revoke = %v, want ErrLost", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release of a revoked lease = %v, want nil", err)
	}
	if ok, err := s.Revoke(t.Context(), "r", store.Which{}); ok || err != nil {
		t.Errorf("Revoke of a free key = %v, %v; want false, nil", ok, err)
	}
	l2 := acquire(t, s, "r", b.claim("next"))
	if _, err := l2.Renew(t.Context()); err != nil {
		t.Errorf("Renew of the next holder: %v", err)
	}
	release(t, l2)
	if _, err := l2.Renew(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Renew after Release = %v, want ErrLost", err)
	}
}

// changeBound is the contract's "within a second" (S5, E3), with room for a
// loaded 2-core machine under -race: the bound the issue asks to assert.
const changeBound = 2 * time.Second

func testChangesWithinASecond(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	other := b.openSecond(t, desc)
	l := acquire(t, s, "c", b.claim("watched"))
	drain(l.Changes())
	if ok, err := other.Revoke(t.Context(), "c", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	start := time.Now()
	testsupport.RecvWithin(t, l.Changes(), changeBound, "Changes after a revocation")
	t.Logf("revocation seen after %v", time.Since(start))
	if _, err := l.Check(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Check after the change = %v, want ErrLost", err)
	}
	release(t, l)
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func testCancel(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	if ok, err := s.Cancel(t.Context(), "x", store.Which{}); ok || err != nil {
		t.Errorf("Cancel of a free key = %v, %v; want false, nil", ok, err)
	}
	l := acquire(t, s, "x", b.claim("cancelled"))
	drain(l.Changes())
	if req, err := l.Check(t.Context()); err != nil || req != store.RequestNone {
		t.Errorf("Check before a cancel = %v, %v", req, err)
	}
	if ok, err := s.Cancel(t.Context(), "x", store.Which{}); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	testsupport.RecvWithin(t, l.Changes(), changeBound, "Changes after a cancel request")
	if req, err := l.Check(t.Context()); err != nil || req != store.RequestCancel {
		t.Errorf("Check after Cancel = %v, %v; want RequestCancel", req, err)
	}
	if st := status(t, s, "x"); st.Holder == nil || !st.Holder.Cancel {
		t.Errorf("status after Cancel: holder %+v, want cancel_requested", st.Holder)
	}
	// A cancel request keeps the lease: it is renewed until released.
	if _, err := l.Renew(t.Context()); err != nil {
		t.Errorf("Renew after Cancel: %v", err)
	}
	release(t, l)
	// The request was for that holder, not the next.
	next := acquire(t, s, "x", b.claim("next"))
	if req, err := next.Check(t.Context()); err != nil || req != store.RequestNone {
		t.Errorf("next holder's Check = %v, %v; want no request", req, err)
	}
	release(t, next)
}

func testCancelledWait(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	l := acquire(t, s, "w", b.claim("holder"))
	ctx, cancel := context.WithCancelCause(t.Context())
	why := errors.New("the caller gave up")
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Acquire(ctx, "w", b.claim("waiter"))
		done <- err
	}()
	waitWaiters(t, s, "w", 1)
	cancel(why)
	if err := testsupport.RecvWithin(t, done, guard, "the cancelled Acquire to return"); !errors.Is(err, why) {
		t.Errorf("cancelled Acquire = %v, want the context's cause", err)
	}
	if st := status(t, s, "w"); len(st.Waiters) != 0 {
		t.Errorf("waiters after a cancelled wait: %+v", st.Waiters)
	}
	release(t, l)
}

func testShapes(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	st := status(t, s, "free")
	if st.Key != "free" || st.State != store.Free || st.Holder != nil || st.Waiters == nil || len(st.Waiters) != 0 {
		t.Errorf("status of a free key: %+v", st)
	}
	before := time.Now().Add(-time.Second)
	l := acquire(t, s, "b/held", b.claim("shape"))
	other := acquire(t, s, "a", b.claim("other"))
	st = status(t, s, "b/held")
	h := st.Holder
	host, _ := os.Hostname()
	if st.State != store.Held || h == nil || h.Name != "shape" || h.Reason != "conformance" || h.PID != os.Getpid() ||
		h.Host != host || h.Fence != l.Fence() || h.Acquired.Before(before) || !h.Expires.After(h.Acquired) {
		t.Errorf("status of a held key: %+v holder %+v", st, h)
	}
	list, err := s.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var keys []string
	for _, e := range list {
		keys = append(keys, e.Key)
		if e.Key == "b/held" && (e.State != store.Held || e.Holder == nil || e.Holder.Fence != l.Fence()) {
			t.Errorf("List entry %+v disagrees with Status", e)
		}
	}
	if !slices.IsSorted(keys) || !slices.Contains(keys, "a") || !slices.Contains(keys, "b/held") {
		t.Errorf("List keys %v: want sorted, with a and b/held", keys)
	}
	pruned, err := s.Prune(t.Context())
	if err != nil || pruned == nil {
		t.Fatalf("Prune = %v, %v; want a list, empty or not", pruned, err)
	}
	for _, p := range pruned {
		if p.What == "" {
			t.Errorf("Prune reported %+v without saying what", p)
		}
	}
	if st := status(t, s, "b/held"); st.State != store.Held {
		t.Errorf("Prune touched a live holder: %+v", st)
	}
	if _, err := l.Renew(t.Context()); err != nil {
		t.Errorf("Renew after Prune: %v", err)
	}
	release(t, l)
	release(t, other)
	if st := status(t, s, "b/held"); st.State != store.Free || st.Holder != nil {
		t.Errorf("status after release: %+v", st)
	}
}

func testLeftoversHandedOn(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	const marker = "STORETEST_TREE=dead-holder"
	dead := b.spawn(t, desc, "l", marker)
	deadFence := dead.acquired(guard)
	deadPID := dead.Pid()
	dead.Kill()
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(t.Context(), b.deadWithin())
	defer cancel()
	first, _, err := s.Acquire(ctx, "l", b.claim("first"))
	if err != nil || first == nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	p := first.Predecessor()
	if p == nil || p.PID != deadPID || p.Host != host || p.Fence != deadFence || !slices.Contains(leftovers(p), marker) {
		t.Errorf("next holder's predecessor %+v, want the dead holder pid %d on %s, fence %d, leftovers with %q", p, deadPID, host, deadFence, marker)
	}
	// Not confirmed stopped: passed on through a release.
	release(t, first)
	second := acquire(t, s, "l", b.claim("second"))
	if p := second.Predecessor(); p == nil || !slices.Contains(leftovers(p), marker) {
		t.Errorf("predecessor %+v after a holder that did not confirm the leftovers stopped: want them passed on", p)
	}
	// Revoked while it stopped them, it confirms them all the same: its
	// write may fail as lost, but its release records them gone.
	if ok, err := s.Revoke(t.Context(), "l", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if err := second.LeftoversStopped(t.Context()); err != nil && !errors.Is(err, store.ErrLost) {
		t.Fatalf("LeftoversStopped of a revoked lease: %v", err)
	}
	release(t, second)
	third := acquire(t, s, "l", b.claim("third"))
	if p := third.Predecessor(); p != nil {
		t.Errorf("predecessor %+v after the leftovers were confirmed stopped by a holder revoked meanwhile", p)
	}
	release(t, third)
}

// leftovers are the trees a predecessor names, by marker; each must carry
// the host it runs on.
func leftovers(p *store.Holder) []string {
	if len(p.Leftovers) == 0 {
		return []string{p.Marker}
	}
	var markers []string
	for _, l := range p.Leftovers {
		if l.Host == "" {
			continue // no host: nobody may act on it
		}
		markers = append(markers, l.Marker)
	}
	return markers
}

func testClose(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	l := acquire(t, s, "z", b.claim("closing"))
	release(t, l)
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, _, err := s.Acquire(t.Context(), "z", b.claim("after close")); err == nil {
		t.Error("Acquire after Close succeeded")
	}
}
