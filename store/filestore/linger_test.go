package filestore

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A head waiter of --slots N sleeps in flock(LOCK_SH) on every busy
// slot's live; once it takes one, the others are left to goroutines that
// get their LOCK_SH when those holders go, and drop it at once. That
// brief lock must not make a freed slot look held: a newcomer that
// finds every slot free takes slot 0 (M1, lowest first), and one that
// does not wait is not told the key is busy.
func TestALingeringWaitDoesNotHoldAFreedSlot(t *testing.T) {
	s, _ := newStore(t)
	other, err := Open(s.root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	const rounds = 300
	for r := range rounds {
		key := fmt.Sprint("linger-", r)
		l0, _, err := s.Acquire(t.Context(), key, slotsClaim("slot0", 2))
		if err != nil || l0 == nil {
			t.Fatalf("Acquire slot 0: %v", err)
		}
		l1, _, err := s.Acquire(t.Context(), key, slotsClaim("slot1", 2))
		if err != nil || l1 == nil {
			t.Fatalf("Acquire slot 1: %v", err)
		}
		w := waiting(t, other, key, slotsClaim("waiter", 2), 1)
		if err := l1.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		lw := <-w
		if lw == nil || lw.Slot() != 1 {
			t.Fatalf("the waiter took %v", lw)
		}
		// The waiter's wait on slot 0 lingers; slot 1's holder goes,
		// then slot 0's: the key is free.
		if err := lw.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := l0.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		c := claim("newcomer")
		c.Wait = false
		l, h, err := s.Acquire(t.Context(), key, c)
		switch {
		case err != nil:
			t.Fatalf("Acquire of the free key: %v", err)
		case l == nil:
			bad++
			t.Logf("round %d: an exclusive claim of the free key found it busy, held by %+v", r, h)
		default:
			l.Release(context.Background())
		}
	}
	time.Sleep(10 * time.Millisecond)
	if bad > 0 {
		t.Errorf("%d of %d exclusive claims without --wait found a free key busy: a lingering waiter's LOCK_SH on a freed slot's live", bad, rounds)
	}
}
