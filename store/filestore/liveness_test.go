package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

func TestDeadHolderIsTakenOverAtOnce(t *testing.T) {
	s, root := newStore(t)
	c := spawn(t, "hold", root, "k", helperMarker+"=tree-of-the-dead")
	fence, _ := strconv.ParseUint(c.Expect("acquired"), 10, 64)
	c.Kill()
	// Its lease has most of an hour to run; it is taken all the same.
	l, h, err := s.Acquire(t.Context(), "k", claim("next"))
	if err != nil || l == nil {
		t.Fatalf("Acquire after the holder died = %v, %+v, %v", l, h, err)
	}
	defer mustRelease(t, l)
	p := l.Predecessor()
	if p == nil || p.PID != c.Pid() || p.Marker != "tree-of-the-dead" || p.Fence != fence || p.Name != "helper" {
		t.Errorf("Predecessor = %+v, want pid %d, its marker and fence %d", p, c.Pid(), fence)
	}
	if l.Fence() != fence+1 {
		t.Errorf("fence %d after the dead holder's %d", l.Fence(), fence)
	}
}

func TestStatusShowsDeadHolderAsFree(t *testing.T) {
	s, root := newStore(t)
	c := spawn(t, "hold", root, "k")
	c.Expect("acquired")
	if st := mustStatus(t, s, "k"); st.State != store.Held || st.Holder.PID != c.Pid() {
		t.Fatalf("status of a live holder: %+v", st)
	}
	c.Kill()
	if st := mustStatus(t, s, "k"); st.State != store.Free || st.Holder != nil {
		t.Errorf("status of a dead holder: %+v, want free", st)
	}
}

func TestStoppedHolderPastExpiryIsNotTaken(t *testing.T) {
	clk := newClock()
	s, root := newStore(t, Options{Now: clk.now})
	c := spawn(t, "hold", root, "k") // its own clock: the real one, TTL an hour
	c.Expect("acquired")
	if err := syscall.Kill(c.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	clk.add(24 * 365 * time.Hour) // this store sees the lease long expired
	st := mustStatus(t, s, "k")
	if st.State != store.Expired || st.Holder.PID != c.Pid() {
		t.Fatalf("status of a stopped holder past expiry: %+v", st)
	}
	l, h, err := s.Acquire(t.Context(), "k", claim("thief"))
	if l != nil || err != nil || h == nil || h.PID != c.Pid() {
		t.Fatalf("Acquire of a stopped holder's expired lease = %v, %+v, %v; want busy", l, h, err)
	}
	pruned, err := s.Prune(t.Context())
	if err != nil || len(pruned) != 0 {
		t.Errorf("Prune with a stopped holder = %+v, %v; want nothing", pruned, err)
	}
	syscall.Kill(c.Pid(), syscall.SIGCONT)
	c.Stdin.Close()
	c.Expect("released")
	mustRelease(t, mustAcquire(t, s, "k", claim("next")))
}

// changed waits for a lease's Changes, failing after the guard.
func changed(t *testing.T, l store.Lease, what string) {
	t.Helper()
	select {
	case <-l.Changes():
	case <-time.After(testsupport.Guard):
		t.Fatalf("Changes did not fire within %v after %s", testsupport.Guard, what)
	}
}

// quiet drains a lease's Changes of what its own writes caused.
func quiet(l store.Lease) {
	select {
	case <-l.Changes():
	default:
	}
}

func TestRevoke(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	l := mustAcquire(t, s, "k", claim("victim"))
	quiet(l)
	if ok, err := s.Revoke(ctx, "k", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	changed(t, l, "a revoke")
	if _, err := l.Check(ctx); !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("Check after revoke: %v, want ErrLost saying revoked", err)
	}
	if _, err := l.Renew(ctx); !errors.Is(err, store.ErrLost) {
		t.Errorf("Renew after revoke: %v, want ErrLost", err)
	}
	if err := l.Tick(ctx, time.Now()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Tick after revoke: %v, want ErrLost", err)
	}
	// The revoked holder still holds live: nobody gets in before it lets go.
	if st := mustStatus(t, s, "k"); st.State != store.Held || st.Holder.Name != "victim" {
		t.Errorf("status of a revoked, still running holder: %+v", st)
	}
	if l2, h, err := s.Acquire(ctx, "k", claim("early")); l2 != nil || err != nil || h.Name != "victim" {
		t.Fatalf("Acquire while the revoked holder runs = %v, %+v, %v; want busy", l2, h, err)
	}
	got := make(chan store.Lease, 1)
	go func() {
		c := claim("next")
		c.Wait = true
		l, _, err := s.Acquire(context.Background(), "k", c)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitWaiters(t, s, "k", 1)
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release of a revoked lease: %v", err)
	}
	next := <-got
	if next == nil {
		t.Fatal("the waiter got no lease")
	}
	defer mustRelease(t, next)
	if next.Fence() != l.Fence()+1 {
		t.Errorf("fence after revoke = %d, want %d", next.Fence(), l.Fence()+1)
	}
	if p := next.Predecessor(); p != nil {
		t.Errorf("predecessor after the revoked holder released cleanly: %+v", p)
	}
}

func TestRevokedHolderThatDiesIsAPredecessor(t *testing.T) {
	s, root := newStore(t)
	c := spawn(t, "hold", root, "k", helperMarker+"=m")
	c.Expect("acquired")
	if ok, err := s.Revoke(t.Context(), "k", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if ok, err := s.Revoke(t.Context(), "k", store.Which{}); !ok || err != nil {
		t.Errorf("second Revoke while the holder runs = %v, %v; want true", ok, err)
	}
	c.Kill()
	if ok, err := s.Revoke(t.Context(), "k", store.Which{}); ok || err != nil {
		t.Errorf("Revoke after the holder died = %v, %v; want false", ok, err)
	}
	l := mustAcquire(t, s, "k", claim("next"))
	defer mustRelease(t, l)
	if p := l.Predecessor(); p == nil || p.PID != c.Pid() || p.Marker != "m" {
		t.Errorf("Predecessor = %+v, want the dead revoked holder", p)
	}
}

func TestCancel(t *testing.T) {
	s, root := newStore(t)
	ctx := t.Context()
	if ok, err := s.Cancel(ctx, "k", store.Which{}); ok || err != nil {
		t.Errorf("Cancel of an unknown key = %v, %v", ok, err)
	}
	l := mustAcquire(t, s, "k", claim("a"))
	quiet(l)
	if ok, err := s.Cancel(ctx, "k", store.Which{}); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	changed(t, l, "a cancel")
	if req, err := l.Check(ctx); req != store.RequestCancel || err != nil {
		t.Errorf("Check after cancel = %v, %v; want RequestCancel", req, err)
	}
	if st := mustStatus(t, s, "k"); !st.Holder.Cancel {
		t.Errorf("status does not show the cancel request: %+v", st.Holder)
	}
	mustRelease(t, l)
	if _, err := os.Lstat(filepath.Join(keyPath(root, "k"), "cancel")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cancel file after release: %v", err)
	}
	if ok, err := s.Cancel(ctx, "k", store.Which{}); ok || err != nil {
		t.Errorf("Cancel of a free key = %v, %v; want false", ok, err)
	}
	l = mustAcquire(t, s, "k", claim("b"))
	defer mustRelease(t, l)
	if req, err := l.Check(ctx); req != store.RequestNone || err != nil {
		t.Errorf("Check of the next holder = %v, %v; want none", req, err)
	}
}

func TestCancelOfADeadHolderIsFalse(t *testing.T) {
	s, root := newStore(t)
	c := spawn(t, "hold", root, "k")
	c.Expect("acquired")
	c.Kill()
	if ok, err := s.Cancel(t.Context(), "k", store.Which{}); ok || err != nil {
		t.Errorf("Cancel of a dead holder = %v, %v; want false", ok, err)
	}
}

// A key's first record is made whole by temporary file and rename; a
// writer killed before the rename leaves no record and a stray temporary
// file, which Prune removes.
func TestCrashBeforeRenameNeverRepeatsAFence(t *testing.T) {
	s, root := newStore(t)
	var last uint64
	for range 3 {
		l := mustAcquire(t, s, "a", claim("a"))
		last = l.Fence()
		mustRelease(t, l)
	}
	c := spawn(t, "crash", root, "k", "FILESTORE_TEST_CUT=rename")
	if err := c.Wait(); !testsupport.KilledBy(err, syscall.SIGKILL) {
		t.Fatalf("the writer was to kill itself before the rename; it ended with %v", err)
	}
	kd := keyPath(root, "k")
	if _, err := os.Lstat(filepath.Join(kd, leaseFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a lease record made by a writer that died before the rename: %v", err)
	}
	temps, _ := filepath.Glob(filepath.Join(kd, statefs.TempPrefix+"*"))
	if len(temps) != 1 {
		t.Fatalf("temporary files after the crash: %v, want the one it left", temps)
	}
	if st := mustStatus(t, s, "k"); st.State != store.Free {
		t.Errorf("status with a stray temp file: %+v", st)
	}
	pruned, err := s.Prune(t.Context())
	found := false
	for _, p := range pruned {
		found = found || p.What == "temp file" && p.Path == temps[0] && p.Key == "k"
	}
	if err != nil || !found {
		t.Errorf("Prune = %+v, %v; want the temp file %s among them", pruned, err, temps[0])
	}
	if _, err := os.Lstat(temps[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp file after Prune: %v", err)
	}
	l := mustAcquire(t, s, "k", claim("b"))
	if l.Fence() <= last {
		t.Errorf("fence %d after a crash, not above the last handed out (%d)", l.Fence(), last)
	}
	mustRelease(t, l)
}

// A holder SIGKILLed in the middle of writing its record in place, at
// several points of the slot, leaves the record before the write: the key
// reads as a dead holder's, is taken over at once with a higher fence, and
// nothing reads as corrupt. (slots_test.go cuts at every byte in-process.)
func TestCrashInTheMiddleOfAnInPlaceWrite(t *testing.T) {
	s, root := newStore(t)
	for _, cut := range []int{0, 1, statefs.SlotHeader - 1, statefs.SlotHeader, statefs.SlotHeader + 40, 1 << 20} {
		c := spawn(t, "crash", root, "k", "FILESTORE_TEST_CUT="+strconv.Itoa(cut), helperMarker+"=crashed")
		fence, _ := strconv.ParseUint(c.Expect("acquired"), 10, 64)
		if err := c.Wait(); !testsupport.KilledBy(err, syscall.SIGKILL) {
			t.Fatalf("cut %d: the writer was to kill itself in the write; it ended with %v", cut, err)
		}
		st := mustStatus(t, s, "k")
		if st.State != store.Free {
			t.Fatalf("cut %d: status after the crash %+v, want free (its holder is dead)", cut, st)
		}
		l := mustAcquire(t, s, "k", claim("next"))
		p := l.Predecessor()
		if l.Fence() <= fence || p == nil || p.PID != c.Pid() || p.Fence != fence {
			t.Errorf("cut %d: took over with fence %d (dead holder's %d), predecessor %+v; want above it, the dead holder", cut, l.Fence(), fence, p)
		}
		if err := l.LeftoversStopped(t.Context()); err != nil {
			t.Fatal(err)
		}
		mustRelease(t, l)
	}
}

func TestPrune(t *testing.T) {
	clk := newClock()
	s, root := newStore(t, Options{Now: clk.now})
	ctx := t.Context()
	// A holder that died with its lease, which then expired.
	dead := spawn(t, "hold", root, "dead", helperMarker+"=leftovers")
	dead.Expect("acquired")
	dead.Kill()
	// A waiter that died in the queue of a live holder.
	live := mustAcquire(t, s, "busy", claim("alive"))
	defer mustRelease(t, live)
	w := spawn(t, "hold", root, "busy")
	waitWaiters(t, s, "busy", 1)
	w.Kill()

	clk.add(2 * time.Hour)
	pruned, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The dead holder's notification socket too: nothing is bound to it.
	want := map[string]string{
		"dead": "expired lease, stale socket",
		"busy": "dead waiter",
	}
	got := map[string][]string{}
	for _, p := range pruned {
		got[p.Key] = append(got[p.Key], p.What)
		if !strings.HasPrefix(p.Path, keyPath(root, p.Key)) {
			t.Errorf("pruned %+v, not in its key's directory", p)
		}
	}
	for key, whats := range got {
		slices.Sort(whats)
		if w := want[key]; strings.Join(whats, ", ") != w {
			t.Errorf("pruned of %s: %q, want %s (all: %+v)", key, whats, w, pruned)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("Prune = %+v, want %v", pruned, want)
	}
	if st := mustStatus(t, s, "busy"); st.State != store.Expired || st.Holder.Name != "alive" {
		t.Errorf("Prune touched a live holder: %+v", st)
	}
	if again, err := s.Prune(ctx); len(again) != 0 || err != nil {
		t.Errorf("second Prune = %+v, %v; want nothing", again, err)
	}
	// The fence survives, and so does the dead holder, for its leftovers.
	l := mustAcquire(t, s, "dead", claim("next"))
	defer mustRelease(t, l)
	if p := l.Predecessor(); l.Fence() <= live.Fence() || p == nil || p.Marker != "leftovers" {
		t.Errorf("after prune: fence %d, predecessor %+v", l.Fence(), p)
	}
}

func TestWaiterTakesOverWhenTheHolderIsKilled(t *testing.T) {
	s, root := newStore(t)
	holder := spawn(t, "hold", root, "k", helperMarker+"=killed-holder")
	holder.Expect("acquired")
	waiter := spawn(t, "hold", root, "k")
	waitWaiters(t, s, "k", 1)
	holder.Kill()
	// The waiter sleeps in flock on live; the holder's death wakes it.
	if fence := waiter.Expect("acquired"); fence != "2" {
		t.Errorf("waiter got fence %s, want 2", fence)
	}
	// The new holder's own queue entry goes a moment after it acquired
	// (in the background, off the handoff's path), but status never
	// lists it meanwhile (c05c2d3): no waiting for it here.
	if st := mustStatus(t, s, "k"); st.State != store.Held || st.Holder.PID != waiter.Pid() || len(st.Waiters) != 0 {
		t.Errorf("status after the handoff: %+v", st)
	}
	waiter.Stdin.Close()
	waiter.Expect("released")
}
