package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// done reads key's done IDs.
func done(t *testing.T, s store.Store, key string) []store.Done {
	t.Helper()
	d, err := s.Done(t.Context(), key)
	if err != nil {
		t.Fatalf("Done(%q): %v", key, err)
	}
	return d
}

// ids is the IDs of done, in order.
func ids(done []store.Done) []string {
	var out []string
	for _, d := range done {
		out = append(out, d.ID)
	}
	return out
}

// A holder's ReleaseDone marks the ID with the release: the next holder,
// on another client, finds it done with the fence, name and host of the
// run that did it, newest first; a plain Release marks nothing (O1, O3).
func testOnceMarkedWithTheRelease(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	if d := done(t, s, "o"); len(d) != 0 {
		t.Fatalf("a key never used has done IDs %v", ids(d))
	}
	l := acquire(t, s, "o", b.claim("first"))
	if err := l.ReleaseDone(t.Context(), "2026-12-04T21:00:00Z"); err != nil {
		t.Fatalf("ReleaseDone: %v", err)
	}
	other := b.openSecond(t, desc)
	got := done(t, other, "o")
	if len(got) != 1 || got[0].ID != "2026-12-04T21:00:00Z" || got[0].Fence != l.Fence() || got[0].Name != "first" || got[0].Host == "" || got[0].At.IsZero() {
		t.Fatalf("done after ReleaseDone = %+v; want the ID with fence %d, name first, a host and a time", got, l.Fence())
	}
	l2 := acquire(t, other, "o", b.claim("second"))
	if l2.Fence() <= l.Fence() {
		t.Errorf("the next holder's fence %d is not above %d", l2.Fence(), l.Fence())
	}
	release(t, l2)
	l3 := acquire(t, s, "o", b.claim("third"))
	if err := l3.ReleaseDone(t.Context(), "b"); err != nil {
		t.Fatalf("ReleaseDone: %v", err)
	}
	if got := ids(done(t, s, "o")); len(got) != 2 || got[0] != "b" || got[1] != "2026-12-04T21:00:00Z" {
		t.Errorf("done IDs = %v; want [b 2026-12-04T21:00:00Z]", got)
	}
	if d := done(t, s, "o2"); len(d) != 0 {
		t.Errorf("another key has done IDs %v", ids(d))
	}
}

// A revoked holder marks nothing: its ReleaseDone fails with ErrLost and
// the ID stays open, for the next holder to run (O1, O4).
func testOnceRevokedMarksNothing(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	l := acquire(t, s, "o", b.claim("revoked"))
	if ok, err := s.Revoke(t.Context(), "o", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if err := l.ReleaseDone(t.Context(), "id"); !errors.Is(err, store.ErrLost) {
		t.Errorf("ReleaseDone of a revoked lease = %v, want ErrLost", err)
	}
	if d := done(t, s, "o"); len(d) != 0 {
		t.Fatalf("a revoked holder marked %v", ids(d))
	}
	l2 := acquire(t, s, "o", b.claim("next"))
	if err := l2.ReleaseDone(t.Context(), "id"); err != nil {
		t.Fatalf("the next holder's ReleaseDone: %v", err)
	}
	if got := done(t, s, "o"); len(got) != 1 || got[0].Fence != l2.Fence() {
		t.Errorf("done = %+v; want id by fence %d", got, l2.Fence())
	}
}

// Reopen forgets one ID and keeps the others; an ID not done is reported
// as such (O3).
func testOnceReopen(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	if ok, err := s.Reopen(t.Context(), "o", "a"); ok || err != nil {
		t.Fatalf("Reopen on a key never used = %v, %v; want false, nil", ok, err)
	}
	for _, id := range []string{"a", "b"} {
		l := acquire(t, s, "o", b.claim(id))
		if err := l.ReleaseDone(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.Reopen(t.Context(), "o", "a"); !ok || err != nil {
		t.Fatalf("Reopen(a) = %v, %v; want true, nil", ok, err)
	}
	if got := ids(done(t, s, "o")); len(got) != 1 || got[0] != "b" {
		t.Errorf("done after Reopen(a) = %v; want [b]", got)
	}
	if ok, err := s.Reopen(t.Context(), "o", "a"); ok || err != nil {
		t.Errorf("Reopen(a) again = %v, %v; want false, nil", ok, err)
	}
	if ok, err := s.Reopen(t.Context(), "o", "b"); !ok || err != nil {
		t.Errorf("Reopen(b) = %v, %v; want true, nil", ok, err)
	}
	if d := done(t, s, "o"); len(d) != 0 {
		t.Errorf("done after reopening every ID = %v", ids(d))
	}
}

// Prune keeps a free key's done IDs (O3).
func testOncePruneKeeps(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	l := acquire(t, s, "o", b.claim("x"))
	if err := l.ReleaseDone(t.Context(), "kept"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(t.Context()); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if got := ids(done(t, s, "o")); len(got) != 1 || got[0] != "kept" {
		t.Errorf("done after Prune = %v; want [kept]", got)
	}
}

// AwaitDone wakes as soon as another client's holder marks the ID, and
// not for another ID's mark; a cancelled wait returns its cause (O1).
func testOnceAwaitDone(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	l := acquire(t, s, "o", b.claim("holder"))
	other := b.openSecond(t, desc)
	got := make(chan *store.Done, 1)
	go func() {
		d, err := other.AwaitDone(t.Context(), "o", "x")
		if err != nil {
			t.Errorf("AwaitDone: %v", err)
		}
		got <- d
	}()
	if err := l.ReleaseDone(t.Context(), "y"); err != nil {
		t.Fatal(err)
	}
	l2 := acquire(t, s, "o", b.claim("holder"))
	select {
	case d := <-got:
		t.Fatalf("AwaitDone(x) returned %+v on a mark of y", d)
	default:
	}
	if err := l2.ReleaseDone(t.Context(), "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d == nil || d.ID != "x" || d.Fence != l2.Fence() {
			t.Fatalf("AwaitDone(x) = %+v; want x by fence %d", d, l2.Fence())
		}
	case <-time.After(guard):
		t.Fatal("AwaitDone never saw x marked")
	}
	cause := errors.New("given up")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	if d, err := other.AwaitDone(ctx, "o", "z"); d != nil || !errors.Is(err, cause) {
		t.Errorf("a cancelled AwaitDone = %+v, %v; want its cause", d, err)
	}
}
