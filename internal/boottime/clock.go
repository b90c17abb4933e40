// Package boottime is the clock fencerun keeps time on: CLOCK_BOOTTIME,
// which keeps counting while the system is suspended, so a deadline passed
// during suspend is seen as passed on waking (S3). Kernel is that clock,
// with timers on timerfd(2) that the kernel fires at the deadline, also
// one that passed while suspended; Fake is one that moves only when a test
// says so, so that tests never sleep to wait for a deadline.
//
// It guarantees that Kernel's instants never go back and count suspend;
// not that two processes' readings can be compared across a reboot (they
// are durations since boot).
package boottime

import "time"

// Clock is the time the keeper, the watchdog and the supervisor run on. Instants are
// durations since an arbitrary origin; the real clock is CLOCK_BOOTTIME, which
// keeps counting while the system is suspended, so a deadline passed during
// suspend is seen as passed on waking (S3).
type Clock interface {
	Now() time.Duration
	// NewTimer returns a disarmed timer.
	NewTimer() (Timer, error)
}

// Timer fires once at the instant it was last Set to. It is for one
// goroutine at a time.
type Timer interface {
	// C receives when the timer fires.
	C() <-chan struct{}
	// Set arms the timer to fire at instant at (at once if at has passed),
	// replacing any earlier setting.
	Set(at time.Duration)
	// SetThen is Set(at), and, unless set again meanwhile, a second firing
	// at then (then > at): a deadline that stays armed after the first
	// without a second call. It may fire again later, at then's distance
	// from at.
	SetThen(at, then time.Duration)
	Close() error
}
