package etcdstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// TestContendersWatchOnlyTheirPredecessor queues 200 contenders on one
// key, one by one, behind a holder, and lets them drain (S10, issue 21):
// each takes the lease in arrival order, and each takes at most twice,
// once as it queues and once when the contender just ahead of it is
// deleted. A waiter woken by every deletion under the key's prefix would
// take again at each of them: 200 x 200.
func TestContendersWatchOnlyTheirPredecessor(t *testing.T) {
	s, _ := newStore(t)
	const key, n = "fifo", 200
	var takes atomic.Int32
	afterTake = func(k string, held bool) {
		if k == key {
			takes.Add(1)
		}
	}
	t.Cleanup(func() { afterTake = nil })
	holder := acquireNow(t, s, key, store.Claim{Name: "holder"})
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			c := store.Claim{Name: "w" + strconv.Itoa(i), TTL: 10 * time.Second, Wait: true}
			l, _, err := s.Acquire(context.Background(), key, c)
			if err != nil || l == nil {
				t.Errorf("contender %d: %v, %v", i, l, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("contender %d release: %v", i, err)
			}
		})
		// Queued once its key is under the prefix, beside the holder's
		// and those before it: a count, lighter than a Status.
		testsupport.WaitFor(t, strconv.Itoa(i+1)+" waiters", func() bool {
			resp, err := s.c.Get(t.Context(), prefixOf(key), withPrefixCount()...)
			return err == nil && resp.Count == int64(i+2)
		})
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != n {
		t.Fatalf("%d of %d contenders took the lease", len(order), n)
	}
	inversions := 0
	for i, w := range order {
		if w != i {
			inversions++
		}
	}
	if inversions != 0 {
		t.Errorf("%d of %d contenders took the lease out of arrival order: %v", inversions, n, order)
	}
	if got := takes.Load(); got > 2*n {
		t.Errorf("%d contenders took %d times, want at most %d: a waiter is woken by more than its predecessor", n, got, 2*n)
	}
}
