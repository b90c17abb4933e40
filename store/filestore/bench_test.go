package filestore

import (
	"context"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// BenchmarkAcquireRelease is P1's store part: one uncontended acquisition
// (with its durable fence) and release.
func BenchmarkAcquireRelease(b *testing.B) {
	s, _ := newStore(b)
	for b.Loop() {
		mustRelease(b, mustAcquire(b, s, "bench", claim("b")))
	}
}

// BenchmarkRenew is one renewal: a compare-and-swap of the record.
func BenchmarkRenew(b *testing.B) {
	s, _ := newStore(b)
	l := mustAcquire(b, s, "bench", claim("b"))
	defer mustRelease(b, l)
	ctx := context.Background()
	for b.Loop() {
		if _, err := l.Renew(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff is P2's store part: from a holder's Release to the
// head waiter's Acquire returning.
func BenchmarkHandoff(b *testing.B) { benchHandoff(b, claim) }

// BenchmarkSlotHandoff is the same for one of 4 slots, the others held:
// the head waiter sleeps on all 4 slots' live (holders.go).
func BenchmarkSlotHandoff(b *testing.B) {
	benchHandoff(b, func(name string) store.Claim { return slotsClaim(name, 4) })
}

func benchHandoff(b *testing.B, claim func(string) store.Claim) {
	s, _ := newStore(b)
	ctx := context.Background()
	l := mustAcquire(b, s, "bench", claim("b"))
	for range claim("b").Slots - 1 {
		defer mustRelease(b, mustAcquire(b, s, "bench", claim("other")))
	}
	var total time.Duration
	for b.Loop() {
		got := make(chan store.Lease)
		go func() {
			c := claim("w")
			c.Wait = true
			next, _, err := s.Acquire(ctx, "bench", c)
			if err != nil {
				b.Error(err)
			}
			got <- next
		}()
		waitWaiters(b, s, "bench", 1)
		start := time.Now()
		mustRelease(b, l)
		l = <-got
		total += time.Since(start)
	}
	mustRelease(b, l)
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/handoff")
}

// BenchmarkStatus reads one key among many (P6: it must not grow with them).
func BenchmarkStatus(b *testing.B) {
	s, root := newStore(b)
	makeFreeKeys(b, root, 2000)
	l := mustAcquire(b, s, "bench", claim("b"))
	defer mustRelease(b, l)
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Status(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList10000 is P6: list over 10,000 keys.
func BenchmarkList10000(b *testing.B) {
	s, root := newStore(b)
	makeFreeKeys(b, root, 10000)
	ctx := context.Background()
	for b.Loop() {
		list, err := s.List(ctx)
		if err != nil || len(list) != 10000 {
			b.Fatal(len(list), err)
		}
	}
}
