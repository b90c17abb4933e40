package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fencerun/fencerun/store"
)

// witness watches holds from outside the store, as a witness per slot
// would: between an Acquire's return and the Release call a lease is
// held, so the holds it sees must overlap only as the kinds allow, and
// each fence must be new and above every fence handed out before the
// claim was made (S1, S4, M1, M2).
type witness struct {
	mu     sync.Mutex
	slots  map[int]bool
	shared int
	excl   bool
	max    uint64 // the greatest fence handed out so far
	fences map[uint64]bool
	bad    []string
	most   int // the most holders seen at once
}

func newWitness() *witness {
	return &witness{slots: map[int]bool{}, fences: map[uint64]bool{}}
}

// seen is the greatest fence handed out so far.
func (w *witness) seen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// enter records l, a hold of kind among n slots, claimed once fence
// before had been handed out.
func (w *witness) enter(l store.Lease, kind store.Kind, n int, before uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, slot := l.Fence(), l.Slot()
	if w.fences[f] || f <= before {
		w.bad = append(w.bad, fmt.Sprintf("fence %d handed out twice, or not above %d handed out before the claim", f, before))
	}
	w.fences[f], w.max = true, max(w.max, f)
	switch kind {
	case store.KindSlot:
		if slot < 0 || slot >= n || w.slots[slot] || len(w.slots) >= n {
			w.bad = append(w.bad, fmt.Sprintf("slot %d taken (fence %d) while slots %v were held, of %d", slot, f, w.slots, n))
		}
		w.slots[slot] = true
	case store.KindShared:
		if w.excl || slot != -1 {
			w.bad = append(w.bad, fmt.Sprintf("a shared hold (fence %d, slot %d) beside an exclusive one", f, slot))
		}
		w.shared++
	default:
		if w.excl || w.shared > 0 || len(w.slots) > 0 {
			w.bad = append(w.bad, fmt.Sprintf("an exclusive hold (fence %d) beside %d shared holders, exclusive %v", f, w.shared, w.excl))
		}
		w.excl = true
	}
	holders := len(w.slots) + w.shared
	if w.excl {
		holders++
	}
	w.most = max(w.most, holders)
}

// leave records that l, a hold of kind, is about to be released.
func (w *witness) leave(l store.Lease, kind store.Kind) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch kind {
	case store.KindSlot:
		delete(w.slots, l.Slot())
	case store.KindShared:
		w.shared--
	default:
		w.excl = false
	}
}

// contend runs a worker per claim, each on the next of clients, taking
// and releasing key cycles times with the witness watching; each hold
// renews once while it lasts.
func contend(t *testing.T, w *witness, clients []store.Store, key string, claims []store.Claim, cycles int) {
	var wg sync.WaitGroup
	for i, c := range claims {
		s := clients[i%len(clients)]
		kind, n := store.KindOf(c)
		wg.Go(func() {
			for range cycles {
				before := w.seen()
				ctx, cancel := context.WithTimeout(t.Context(), guard)
				l, _, err := s.Acquire(ctx, key, c)
				cancel()
				if err != nil || l == nil {
					t.Errorf("%s: Acquire(%q) = %v", c.Name, key, err)
					return
				}
				w.enter(l, kind, n, before)
				if _, err := l.Renew(t.Context()); err != nil {
					t.Errorf("%s: Renew of slot %d (fence %d): %v", c.Name, l.Slot(), l.Fence(), err)
				}
				w.leave(l, kind)
				if err := l.Release(t.Context()); err != nil {
					t.Errorf("%s: Release: %v", c.Name, err)
				}
			}
		})
	}
	wg.Wait()
	for _, b := range w.bad {
		t.Error(b)
	}
	t.Logf("%d holds, at most %d at once", len(w.fences), w.most)
}

// Six workers on two clients take a key of 3 slots over and over while a
// third client prunes: no two holders share a slot, never more than 3
// hold, every fence is new and above those handed out before, and Prune
// takes nothing from a holder or waiter (M1, S1, S4).
func testSlotsWitness(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	clients := []store.Store{s, b.openSecond(t, desc)}
	var claims []store.Claim
	for i := range 6 {
		claims = append(claims, b.slotClaim(fmt.Sprint("worker", i), 3))
	}
	stop := prunes(t, b.openSecond(t, desc))
	contend(t, newWitness(), clients, "wit", claims, 8)
	t.Logf("pruned %d times meanwhile", stop())
}

// prunes calls s.Prune over and over until the returned stop is called,
// which says how many times it did.
func prunes(t *testing.T, s store.Store) (stop func() int) {
	done := make(chan struct{})
	n := make(chan int, 1)
	go func() {
		count := 0
		for {
			select {
			case <-done:
				n <- count
				return
			default:
			}
			if _, err := s.Prune(t.Context()); err != nil {
				t.Errorf("Prune beside the workers: %v", err)
			}
			count++
		}
	}()
	return func() int {
		close(done)
		return <-n
	}
}

// Four shared and two exclusive workers on two clients take one key over
// and over while a third client prunes: an exclusive holder is alone,
// every fence is new and above those handed out before (M2, S1, S4).
func testSharedWitness(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	clients := []store.Store{s, b.openSecond(t, desc)}
	var claims []store.Claim
	for i := range 4 {
		claims = append(claims, b.sharedClaim(fmt.Sprint("reader", i)))
	}
	claims = append(claims, b.claim("writer0"), b.claim("writer1"))
	stop := prunes(t, b.openSecond(t, desc))
	contend(t, newWitness(), clients, "wit", claims, 8)
	t.Logf("pruned %d times meanwhile", stop())
}
