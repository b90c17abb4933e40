package resident

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// The handover wait runs on the claim's clock (CLOCK_BOOTTIME by default),
// not on the wall or monotonic clock: a newcomer whose machine slept
// through its --handover-wait finds it over on waking. The clock here
// jumps an hour on every reading, so an hour's wait is over at the next
// look; counted on any other clock, it would outlast the test's guard.
func TestHandoverWaitRunsOnTheClaimsClock(t *testing.T) {
	t.Parallel()
	_, mid, newer := progs(t)
	storePath := filepath.Join(t.TempDir(), "app.db")
	holder := mustAcquire(t, storePath, Claim{Build: buildOf(t, mid)}) // never looks at its changes
	var hours atomic.Int64
	slept := func() time.Duration { return time.Duration(hours.Add(1)) * time.Hour }
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	r, ref, err := Acquire(ctx, storePath, Claim{
		Claim: store.Claim{Clock: slept},
		Build: buildOf(t, newer), HandoverWait: time.Hour,
	})
	if err != nil || r != nil || ref == nil || ref.Reason != ReasonHandoverTimedOut || ref.Holder.Fence != holder.Fence() {
		t.Fatalf("Acquire = %v, %+v, %v; want a handover that timed out on the claim's clock", r, ref, err)
	}
}
