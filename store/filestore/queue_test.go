package filestore

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// A wake-up reads only what is ahead of its waiter (issue 21, P2): a
// handoff costs the same with 5 waiters behind the next one or 500. Here
// a garbage entry is planted behind every waiter, where a handoff that
// read the whole queue would find it and fail closed (store.ErrCorrupt);
// one that reads only ahead never sees it, and every waiter takes its
// turn, in arrival order.
func TestWakeUpReadsOnlyWhatIsAhead(t *testing.T) {
	s, root := newStore(t)
	holder := mustAcquire(t, s, "k", claim("holder"))
	const n = 30
	wait := queueInOrder(t, s, "k", n)
	behind := keyPath(root, "k") + "/queue/" + formatSeq(1<<40)
	if err := os.WriteFile(behind, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, holder)
	wait()
}

// queueInOrder starts n waiters on key one by one, each in the queue before
// the next arrives; each takes its turn and releases at once. wait waits
// for all of them and fails the test unless each took the lease, alone,
// in arrival order.
func queueInOrder(t *testing.T, s *Store, key string, n int) (wait func()) {
	var (
		inside, overlaps atomic.Int32
		mu               sync.Mutex
		order            []int
		wg               sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			c := claim("w" + strconv.Itoa(i))
			c.Wait = true
			l, _, err := s.Acquire(context.Background(), key, c)
			if err != nil || l == nil {
				t.Errorf("waiter %d: %v, %v", i, l, err)
				return
			}
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			inside.Add(-1)
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		st := waitWaiters(t, s, key, i+1)
		if st.Waiters[i].Name != "w"+strconv.Itoa(i) {
			t.Fatalf("waiter %d is listed as %+v", i, st.Waiters[i])
		}
	}
	return func() {
		t.Helper()
		wg.Wait()
		if overlaps.Load() != 0 {
			t.Errorf("%d acquisitions overlapped", overlaps.Load())
		}
		if len(order) != n {
			t.Fatalf("%d of %d waiters took the lease: %v", len(order), n, order)
		}
		for i, w := range order {
			if w != i {
				t.Fatalf("acquired in order %v, want arrival order", order)
			}
		}
	}
}
