package boottime

import (
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. Tests use it so that
// they never sleep to wait for a deadline.
type Fake struct {
	mu     sync.Mutex
	now    time.Duration
	timers []*fakeTimer
	set    *sync.Cond // broadcast whenever a timer is set
}

// NewFake returns a Fake at instant start.
func NewFake(start time.Duration) *Fake {
	c := &Fake{now: start}
	c.set = sync.NewCond(&c.mu)
	return c
}

// WaitArmed blocks until some timer of this clock is armed to fire at
// instant at: the goroutine that owns it has seen everything before and is
// waiting. Tests use it before asserting that nothing happened.
func (c *Fake) WaitArmed(at time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.armedLocked(at) {
		c.set.Wait()
	}
}

func (c *Fake) armedLocked(at time.Duration) bool {
	for _, t := range c.timers {
		if t.armed && t.at == at {
			return true
		}
	}
	return false
}

// Now returns the clock's instant.
func (c *Fake) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a disarmed timer on this clock.
func (c *Fake) NewTimer() (Timer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, c: make(chan struct{}, 1)}
	c.timers = append(c.timers, t)
	return t, nil
}

// Advance moves the clock by d and fires the timers whose instant passed.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += d
	for _, t := range c.timers {
		c.fireLocked(t)
	}
}

func (c *Fake) fireLocked(t *fakeTimer) {
	if t.armed && t.at <= c.now {
		t.armed = false
		if t.then > t.at {
			t.at, t.then, t.armed = t.then, 0, true
		}
		select {
		case t.c <- struct{}{}:
		default:
		}
	}
}

type fakeTimer struct {
	clock *Fake
	c     chan struct{}
	at    time.Duration
	then  time.Duration // a second firing (SetThen)
	armed bool
}

func (t *fakeTimer) C() <-chan struct{} { return t.c }

func (t *fakeTimer) Set(at time.Duration) { t.SetThen(at, 0) }

func (t *fakeTimer) SetThen(at, then time.Duration) {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	// A new setting replaces the old one, including a firing not yet received.
	select {
	case <-t.c:
	default:
	}
	t.at, t.then, t.armed = at, then, true
	t.clock.fireLocked(t)
	t.clock.set.Broadcast()
}

func (t *fakeTimer) Close() error {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.armed = false
	return nil
}
