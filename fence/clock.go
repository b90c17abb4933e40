package fence

import "time"

// Clock is the time the keeper and the watchdog run on. Instants are
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
