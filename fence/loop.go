package fence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/logfield"
	"github.com/fencerun/fencerun/store"
)

// opKind is a store operation the keeper runs off its loop.
type opKind int

const (
	opRenew opKind = iota + 1 // Lease.Renew
	opCheck                   // Lease.Check: a revocation, take-over or request
	opTick                    // Lease.Tick: the command's latest liveness tick
)

func (o opKind) String() string {
	switch o {
	case opRenew:
		return "renew"
	case opCheck:
		return "check"
	case opTick:
		return "tick"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// opRequest is one operation for the store's goroutine, sent at sent (the
// loop's reading of the clock, taken just before).
type opRequest struct {
	kind opKind
	sent time.Duration
}

// opResult is the outcome of one store operation run off the loop.
type opResult struct {
	kind opKind
	sent time.Duration
	term store.Term // of a renewal
	req  store.Request
	err  error
}

// loop is one Run of a Keeper: what its select decides on, owned by the
// goroutine that runs it. One goroutine runs the store operations, one at
// a time, for the whole run.
type loop struct {
	k       *Keeper
	ctx     context.Context
	timer   boottime.Timer
	ops     chan opRequest
	results chan opResult

	inflight     bool
	inflightKind opKind
	inflightSent time.Duration
	expiry       time.Duration // the lease's local expiry
	nextRenew    time.Duration
	retry        time.Duration // after a failed renewal or check

	checkWanted bool
	checkAt     time.Duration // a failed check is retried from then on
	tickWanted  *time.Time
	tickAt      time.Time // the tick the operation in flight writes; set before the send
	asked       bool      // a request was passed on

	// Between Pause and the answer to Resume the clock does not end the
	// lease: the command is stopped, and the store decides.
	paused   bool
	resuming chan error    // Resume waits for the answer of a renewal
	resumeOp bool          // the operation in flight is that renewal
	resumeBy time.Duration // no answer by then: the lease counts as lost
	lostErr  error         // lost while paused, told to Resume

	// An outage is the failed operations since the last successful
	// renewal: the first is logged as a warning, the others at debug,
	// and its end once (E10). lastErr is the last renewal's error, which
	// a lease lost to the clock names.
	failures    int
	outageSince time.Duration
	lastErr     error

	known              time.Duration // the clock, read since the select returned; 0: unread
	armedAt, armedThen time.Duration // the timer's last setting
}

func newLoop(ctx context.Context, k *Keeper, timer boottime.Timer) *loop {
	l := &loop{
		k: k, ctx: ctx, timer: timer,
		ops: make(chan opRequest, 1), results: make(chan opResult, 1),
		expiry: k.term.End(), nextRenew: k.term.Start + k.term.TTL/3,
		retry: min(k.ttl/10, time.Second),
	}
	go l.work()
	return l
}

// work runs the store operations the loop sends, until ops is closed.
func (l *loop) work() {
	for r := range l.ops {
		var res opResult
		switch r.kind {
		case opRenew:
			res.term, res.err = l.k.lease.Renew(l.ctx)
		case opCheck:
			res.req, res.err = l.k.lease.Check(l.ctx)
		case opTick:
			res.err = l.k.lease.Tick(l.ctx, l.tickAt)
		}
		res.kind, res.sent = r.kind, r.sent
		// Only when traced: the clock is a system call (CLOCK_BOOTTIME
		// has no vDSO path in Go).
		if log := l.k.log; log.IsTrace() {
			log.Trace("store call", "call", r.kind.String(), "took", logfield.Duration(l.k.clock.Now()-r.sent), "error", res.err)
		}
		l.results <- res
	}
}

// finish ends the store's goroutine after the operation in flight, if any,
// and tells Release when nothing is in flight, so that it waits for the
// last operation rather than run beside it.
func (l *loop) finish() {
	close(l.ops)
	inflight := l.inflight
	go func() {
		if inflight {
			<-l.results
		}
		l.k.idle <- struct{}{}
	}()
}

func (l *loop) run() error {
	l.k.log.Trace("keeping the lease", "valid_until_boottime_ns", int64(l.expiry))
	for {
		now := l.known
		if now == 0 {
			now = l.k.clock.Now()
		}
		l.known = 0
		if err := l.step(now); err != nil {
			return err
		}
		l.arm(now)
		if end, err := l.wait(); end {
			return err
		}
	}
}

// step acts on the clock's reading now: a Resume not answered in time, a
// lease about to expire, and the next store operation to start.
func (l *loop) step(now time.Duration) error {
	if l.resuming != nil && now >= l.resumeBy {
		l.answer(l.lost(fmt.Errorf("no answer from the store within %v of running again", l.k.ttl/3)))
	}
	if !l.paused && now >= l.deadline() {
		return l.lost(l.notRenewed(now))
	}
	if l.inflight {
		return nil
	}
	switch {
	case l.resuming != nil:
		l.resumeOp = true
		l.start(opRenew, now)
	case l.paused:
	case l.checkWanted && now >= l.checkAt:
		l.checkWanted = false
		l.start(opCheck, now)
	case now >= l.nextRenew:
		l.start(opRenew, now)
	case l.tickWanted != nil:
		// Set before the send, read by the worker after it: the channel
		// orders the two; the next is set only once this operation's
		// result came back (inflight).
		l.tickAt = *l.tickWanted
		l.tickWanted = nil
		l.start(opTick, now)
	}
	return nil
}

// deadline is when failing renewals end the lease: early enough for the
// caller's grace before the local expiry.
func (l *loop) deadline() time.Duration { return l.expiry - l.k.reserve() }

// notRenewed says why the lease ran out by the clock: the last renewal's
// error, or the renewal still without an answer (E10).
func (l *loop) notRenewed(now time.Duration) error {
	within := l.k.reserve()
	switch {
	case l.inflight && l.inflightKind == opRenew && l.lastErr == nil:
		return fmt.Errorf("lease not renewed within %v of its expiry: the renewal sent %v ago has no answer",
			within, (now - l.inflightSent).Round(time.Millisecond))
	case l.lastErr != nil:
		return fmt.Errorf("lease not renewed within %v of its expiry; the last renewal failed: %w", within, l.lastErr)
	}
	return fmt.Errorf("lease not renewed within %v of its expiry", within)
}

func (l *loop) start(kind opKind, sent time.Duration) {
	l.inflight, l.inflightKind, l.inflightSent = true, kind, sent
	l.ops <- opRequest{kind: kind, sent: sent}
}

// arm sets the timer for the next thing due after now. The timer fired at
// armedAt and fires next at armedThen by itself: no second timerfd_settime
// a renewal (P4).
func (l *loop) arm(now time.Duration) {
	wake, then := l.deadline(), time.Duration(0)
	if !l.inflight {
		wake = min(wake, l.nextRenew)
		if l.checkWanted {
			wake = min(wake, l.checkAt)
		}
		// The operation started at wake needs the deadline next.
		then = l.deadline()
	}
	switch {
	case l.resuming != nil:
		wake, then = l.resumeBy, 0
	case l.paused:
		wake, then = now+24*time.Hour, 0 // nothing to do until Resume
	}
	if then != 0 || wake != l.armedThen || now < l.armedAt || now >= l.armedThen {
		l.timer.SetThen(wake, then)
		l.armedAt, l.armedThen = wake, then
	}
}

// wait waits for the next event and acts on it; end says Run returns err.
func (l *loop) wait() (end bool, err error) {
	k := l.k
	select {
	case <-l.ctx.Done():
		return true, nil
	case <-k.cancel:
		return true, nil
	case <-l.timer.C():
	case <-k.lease.Changes():
		l.checkWanted, l.checkAt = true, 0
	case t := <-k.ticks:
		l.tickWanted = &t
	case <-k.pause:
		l.paused = true
	case reply := <-k.resume:
		l.resuming, l.resumeBy = reply, k.clock.Now()+k.ttl/3
		if l.lostErr != nil {
			l.answer(l.lostErr)
		}
	case r := <-l.results:
		if err := l.done(r); err != nil {
			return true, err
		}
	}
	return false, nil
}

// done acts on the result of the operation that was in flight.
func (l *loop) done(r opResult) error {
	l.inflight = false
	wasResume := l.resumeOp
	l.resumeOp = false
	switch {
	case errors.Is(r.err, store.ErrLost):
		if !l.paused {
			return l.lost(r.err)
		}
		// Told to Resume, which stops the command for good before the
		// run ends: ending here would let the run group continue the
		// command to stop it gracefully.
		l.lostErr = l.lost(r.err)
		if wasResume {
			l.answer(l.lostErr)
		}
	case r.err != nil:
		l.failed(r, wasResume)
	case r.kind == opRenew:
		l.renewed(r, wasResume)
	case r.kind == opCheck:
		reason := map[store.Request]Reason{store.RequestCancel: Cancelled, store.RequestHandover: Handover}[r.req]
		if reason != 0 && !l.asked {
			l.asked = true
			l.k.requests <- reason
		}
	}
	return nil
}

// failed schedules the retry of an operation that failed, and answers a
// Resume waiting for it.
func (l *loop) failed(r opResult, wasResume bool) {
	k := l.k
	if wasResume {
		if k.clock.Now() < l.deadline() {
			l.answer(nil) // still valid by the clock; retried as usual
		} else {
			l.answer(l.lost(fmt.Errorf("lease not confirmed after running again: %w", r.err)))
		}
	}
	// One warning an outage (E10): a member gone silent made one a
	// retry, every ~13 s, on a lease that was never in danger.
	if r.kind == opRenew {
		l.lastErr = r.err
	}
	l.failures++
	expiresIn := (l.expiry - k.clock.Now()).Round(time.Millisecond)
	if l.failures == 1 {
		l.outageSince = r.sent
		k.log.Warn("lease operation failed; retrying", "op", r.kind.String(), "error", r.err, "expires_in", expiresIn)
	} else {
		k.log.Debug("lease operation failed again; retrying", "op", r.kind.String(), "error", r.err,
			"failures", l.failures, "expires_in", expiresIn)
	}
	switch r.kind {
	case opRenew:
		l.nextRenew = r.sent + l.retry
	case opCheck:
		// Retried, but not in a loop: renewals go on meanwhile, and
		// they see a revocation too.
		l.checkWanted, l.checkAt = true, r.sent+l.retry
	}
}

// renewed takes the term a renewal set: valid for the granted TTL from
// when the renewal was sent, not answered.
func (l *loop) renewed(r opResult, wasResume bool) {
	k := l.k
	at := k.clock.Now()
	if l.failures > 0 {
		k.log.Info("lease renewed again", "failures", l.failures, "outage", logfield.Duration(at-l.outageSince))
		l.failures, l.lastErr = 0, nil
	}
	term := renewed(r, at)
	l.expiry = term.End()
	l.nextRenew = term.Start + term.TTL/3
	k.termMu.Lock()
	k.latest = term
	k.termMu.Unlock()
	traced := k.log.IsTrace()
	if traced {
		k.log.Trace("renewed", "valid_until_boottime_ns", int64(l.expiry))
	}
	if wasResume {
		l.answer(nil)
	}
	if !traced && !wasResume {
		// Nothing since could have waited (a log line on a full pipe,
		// Resume's caller): the loop's reading.
		l.known = at
	}
}

func (l *loop) lost(err error) error {
	return &EndError{Reason: Lost, StopBy: l.expiry - l.k.margin(), Err: err}
}

// answer answers the Resume waiting, unless it was answered already (no
// answer in time).
func (l *loop) answer(err error) {
	if l.resuming == nil {
		return
	}
	l.resuming <- err
	l.resuming = nil
	if err == nil {
		l.paused = false
	}
}
