package fence

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencerun/fencerun/internal/boottime"
)

// Watchdog ends with Stuck when the command ticked at least once and then
// did not tick for StuckAfter (R7). A command that never ticked is never
// stuck: silence from the start is how most commands live.
type Watchdog struct {
	after  time.Duration
	clock  boottime.Clock
	mu     sync.Mutex
	last   time.Duration // instant of the latest tick; 0 until the first
	ticked chan struct{}
	cancel chan struct{}
	stop   sync.Once
}

// NewWatchdog returns a watchdog for stuckAfter, which must be positive.
func NewWatchdog(stuckAfter time.Duration, clock boottime.Clock) (*Watchdog, error) {
	if stuckAfter <= 0 {
		return nil, fmt.Errorf("fence: stuck-after %v is not positive", stuckAfter)
	}
	if clock == nil {
		clock = boottime.Kernel{}
	}
	return &Watchdog{after: stuckAfter, clock: clock,
		ticked: make(chan struct{}, 1), cancel: make(chan struct{})}, nil
}

// Tick records that the command made progress now.
func (w *Watchdog) Tick() {
	w.mu.Lock()
	w.last = max(w.clock.Now(), 1)
	w.mu.Unlock()
	select {
	case w.ticked <- struct{}{}:
	default:
	}
}

// Run waits until the command is stuck (returning *EndError with Reason
// Stuck), or ctx ends or Interrupt is called (returning nil).
func (w *Watchdog) Run(ctx context.Context) error {
	timer, err := w.clock.NewTimer()
	if err != nil {
		return err
	}
	defer timer.Close()
	for {
		w.mu.Lock()
		last := w.last
		w.mu.Unlock()
		if last != 0 {
			if w.clock.Now()-last >= w.after {
				return &EndError{Reason: Stuck, Err: fmt.Errorf("no tick for %v", w.after)}
			}
			timer.Set(last + w.after)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.cancel:
			return nil
		case <-w.ticked:
		case <-timer.C():
		}
	}
}

// Interrupt makes Run return nil; safe to call more than once.
func (w *Watchdog) Interrupt() { w.stop.Do(func() { close(w.cancel) }) }
