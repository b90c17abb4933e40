// Package fence keeps a held lease alive and says, with a typed reason, when
// the command running under it must stop.
//
// A Keeper renews its store.Lease every TTL/3, each renewal conditional on
// the lease still being this holder's (the store's version). The lease is
// counted as valid until the end of the store.Term the acquisition or the
// last successful renewal reported: the TTL granted, counted from the
// moment just before that write or request was *sent*, on CLOCK_BOOTTIME,
// so neither a slow store (a first write that took long) nor a suspended
// laptop can make the keeper believe in a lease that may already have
// expired. When renewals keep failing the keeper gives up early enough that
// the caller can stop the command's whole tree before that moment: the
// EndError it returns carries StopBy, the instant by which the tree must be
// dead.
//
// The keeper learns of a revocation, a take-over, a cancel or a handover
// request through the lease's Changes channel, which backends deliver within
// a second without polling, and checks the lease at once. A revocation or
// take-over ends it (Lost). A cancel or handover request is passed on
// through Requests while the keeper goes on renewing: the command must be
// stopped, and its lease kept and watched until it is gone.
//
// What it does not do: stop anything itself (the supervisor does), or
// guarantee that a command which ignores its stop signal dies before StopBy
// unless the caller kills it at StopBy.
package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/internal/logfield"
	"github.com/fencerun/fencerun/store"
)

// MinTTL is the shortest lease fencerun accepts (CONTRACT.md: at least 1s).
const MinTTL = time.Second

// Reason says why a keeper ended.
type Reason int

const (
	// Lost: the lease was revoked, taken over, or could not be renewed in
	// time. The fence is broken.
	Lost Reason = iota + 1
	// Cancelled: `fencerun cancel` asked the holder to stop.
	Cancelled
	// Handover: a newer build asked for the resident role.
	Handover
	// Stuck: the command ticked, then stopped ticking for --stuck-after.
	Stuck
)

func (r Reason) String() string {
	switch r {
	case Lost:
		return "lost"
	case Cancelled:
		return "cancelled"
	case Handover:
		return "handover"
	case Stuck:
		return "stuck"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// EndError is how a Keeper or Watchdog ends when the command must stop.
type EndError struct {
	Reason Reason
	// StopBy is the instant on the keeper's clock by which the command's
	// tree must be dead (the lease's local expiry less a margin), or 0 when
	// there is no such hurry (cancel, handover, stuck).
	StopBy time.Duration
	Err    error // the store's error behind Lost, if any
}

func (e *EndError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("fence: %s: %v", e.Reason, e.Err)
	}
	return "fence: " + e.Reason.String()
}

func (e *EndError) Unwrap() error { return e.Err }

// Config configures a Keeper.
type Config struct {
	Lease store.Lease
	TTL   time.Duration
	// Grace is the time the caller needs between the stop signal and
	// SIGKILL; the keeper gives up on failing renewals early enough to leave
	// it, up to a third of the TTL.
	Grace  time.Duration
	Clock  Clock // nil: BootClock
	Logger hclog.Logger
}

// Keeper keeps one lease. Create it with New after the lease was acquired
// (its clock starts from the lease's Term, not from New); run it as an
// actor of the run group.
type Keeper struct {
	lease    store.Lease
	ttl      time.Duration
	grace    time.Duration
	clock    Clock
	log      hclog.Logger
	term     store.Term
	ticks    chan time.Time
	requests chan Reason
	cancel   chan struct{}
	stop     sync.Once
	ran      atomic.Bool
	idle     chan struct{} // receives once no store operation is in flight after Run returned
	pause    chan struct{}
	resume   chan chan error
	ended    chan struct{} // closed when Run returned

	termMu sync.Mutex
	latest store.Term // of the acquisition or the last renewal (Renewed)
}

// New validates the timing and returns a Keeper whose lease counts as
// valid until the end of its acquisition's Term. c.Clock must be the clock
// the lease was claimed on (store.Claim.Clock).
func New(c Config) (*Keeper, error) {
	if c.Lease == nil {
		return nil, errors.New("fence: no lease")
	}
	if c.TTL < MinTTL {
		return nil, fmt.Errorf("fence: ttl %v is under the minimum of %v", c.TTL, MinTTL)
	}
	if c.Grace < 0 {
		return nil, fmt.Errorf("fence: negative grace %v", c.Grace)
	}
	if c.Clock == nil {
		c.Clock = BootClock{}
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return &Keeper{
		lease: c.Lease, ttl: c.TTL, grace: c.Grace, clock: c.Clock,
		log:  c.Logger,
		term: c.Lease.Term(), latest: c.Lease.Term(),
		ticks: make(chan time.Time, 1), requests: make(chan Reason, 1), cancel: make(chan struct{}),
		idle:  make(chan struct{}, 1),
		pause: make(chan struct{}), resume: make(chan chan error), ended: make(chan struct{}),
	}, nil
}

// margin is kept between StopBy and the local expiry: the time to deliver
// SIGKILL and for the kernel to tear the tree down.
func (k *Keeper) margin() time.Duration { return min(k.ttl/10, 500*time.Millisecond) }

// reserve is how long before the local expiry the keeper gives up on
// failing renewals: the caller's grace (bounded by a third of the TTL, so
// that there is still room to retry) plus the margin.
func (k *Keeper) reserve() time.Duration { return min(k.grace, k.ttl/3) + k.margin() }

// Requests receives, once, Cancelled or Handover when someone asked the
// holder to stop its command; the keeper goes on keeping the lease.
func (k *Keeper) Requests() <-chan Reason { return k.requests }

// Tick records a liveness tick from the command; the keeper writes it to
// the lease's record. Ticks arriving faster than the keeper can write them
// are coalesced into the latest.
func (k *Keeper) Tick(t time.Time) {
	for {
		select {
		case k.ticks <- t:
			return
		default:
		}
		select {
		case <-k.ticks:
		default:
		}
	}
}

// opResult is the outcome of one store operation run off the loop.
type opResult struct {
	kind string // "renew", "check", "tick"
	sent time.Duration
	term store.Term // of a renewal
	req  store.Request
	err  error
}

// Run keeps the lease until ctx ends or Interrupt is called (returning nil),
// or the command must stop (returning *EndError). Store operations run one at
// a time in a goroutine of their own, so a store that hangs (a guard lock held by
// someone else, a wedged disk) never keeps the keeper from giving up in time.
func (k *Keeper) Run(ctx context.Context) error {
	if !k.ran.CompareAndSwap(false, true) {
		return errors.New("fence: keeper run twice")
	}
	defer close(k.ended)
	var inflight bool
	results := make(chan opResult, 1)
	// One goroutine runs the store operations, one at a time, for the
	// whole run: a goroutine made per renewal, and its stack grown anew
	// each time, was a tenth of a holder's CPU (P4).
	// What it runs comes as a request, not a closure made per operation:
	// no allocation a renewal (P4).
	type request struct {
		kind string
		sent time.Duration
		op   func(ctx context.Context) (store.Term, store.Request, error)
	}
	ops := make(chan request, 1)
	go func() {
		for r := range ops {
			term, req, err := r.op(ctx)
			// Only when traced: the clock is a system call (CLOCK_BOOTTIME
			// has no vDSO path in Go), and the fields are built before
			// hclog looks at the level (P4).
			switch {
			case !k.log.IsTrace():
			case err != nil:
				k.log.Trace("store call", "call", r.kind, "took", logfield.Duration(k.clock.Now()-r.sent), "error", err)
			default:
				k.log.Trace("store call", "call", r.kind, "took", logfield.Duration(k.clock.Now()-r.sent))
			}
			results <- opResult{kind: r.kind, sent: r.sent, term: term, req: req, err: err}
		}
	}()
	defer func() {
		close(ops) // the worker ends after the operation in flight, if any
		// Let Release wait for the last operation rather than run beside it.
		go func() {
			if inflight {
				<-results
			}
			k.idle <- struct{}{}
		}()
	}()
	timer, err := k.clock.NewTimer()
	if err != nil {
		return err
	}
	defer timer.Close()

	expiry := k.term.End()
	nextRenew := k.term.Start + k.term.TTL/3
	retry := min(k.ttl/10, time.Second)
	var (
		checkWanted bool
		checkAt     time.Duration // a failed check is retried from then on
		tickWanted  *time.Time
		asked       bool // a request was passed on

		// Between Pause and the answer to Resume the clock does not end
		// the lease: the command is stopped, and the store decides.
		paused   bool
		resuming chan error    // Resume waits for the answer of a renewal
		resumeOp bool          // the operation in flight is that renewal
		resumeBy time.Duration // no answer by then: the lease counts as lost
		lostErr  error         // lost while paused, told to Resume
	)
	// start sends op to the store's goroutine at sent, the loop's reading
	// of the clock (a system call on CLOCK_BOOTTIME, P4), taken just before.
	start := func(kind string, sent time.Duration, op func(ctx context.Context) (store.Term, store.Request, error)) {
		inflight = true
		ops <- request{kind: kind, sent: sent, op: op}
	}
	// The operations, made once for the run.
	renew := func(ctx context.Context) (store.Term, store.Request, error) {
		term, err := k.lease.Renew(ctx)
		return term, store.RequestNone, err
	}
	check := func(ctx context.Context) (store.Term, store.Request, error) {
		req, err := k.lease.Check(ctx)
		return store.Term{}, req, err
	}
	var tickAt time.Time // the tick the operation in flight writes
	tick := func(ctx context.Context) (store.Term, store.Request, error) {
		return store.Term{}, store.RequestNone, k.lease.Tick(ctx, tickAt)
	}
	lost := func(err error) error {
		return &EndError{Reason: Lost, StopBy: expiry - k.margin(), Err: err}
	}

	k.log.Trace("keeping the lease", "valid_until_boottime_ns", int64(expiry))
	answer := func(err error) {
		if resuming == nil {
			return // answered already: no answer in time
		}
		resuming <- err
		resuming = nil
		if err == nil {
			paused = false
		}
	}

	var known time.Duration              // the clock, read since the select returned; 0: unread
	var armedAt, armedThen time.Duration // the timer's last setting
	for {
		now := known
		if now == 0 {
			now = k.clock.Now()
		}
		known = 0
		if resuming != nil && now >= resumeBy {
			answer(lost(fmt.Errorf("no answer from the store within %v of running again", k.ttl/3)))
		}
		if !paused && now >= expiry-k.reserve() {
			return lost(fmt.Errorf("lease not renewed within %v of its expiry", k.reserve()))
		}
		if !inflight && resuming != nil {
			resumeOp = true
			start("renew", now, renew)
		}
		if !inflight && !paused {
			switch {
			case checkWanted && now >= checkAt:
				checkWanted = false
				start("check", now, check)
			case now >= nextRenew:
				start("renew", now, renew)
			case tickWanted != nil:
				// Set before the send, read by the worker after it: the
				// channel orders the two; the next is set only once this
				// operation's result came back (inflight).
				tickAt = *tickWanted
				tickWanted = nil
				start("tick", now, tick)
			}
		}
		deadline := expiry - k.reserve()
		wake, then := deadline, time.Duration(0)
		if !inflight {
			wake = min(wake, nextRenew)
			if checkWanted {
				wake = min(wake, checkAt)
			}
			// The operation started at wake needs the deadline next.
			then = deadline
		}
		switch {
		case resuming != nil:
			wake, then = resumeBy, 0
		case paused:
			wake, then = now+24*time.Hour, 0 // nothing to do until Resume
		}
		// The timer fired at armedAt and fires next at armedThen by itself:
		// no second timerfd_settime a renewal (P4).
		if then != 0 || wake != armedThen || now < armedAt || now >= armedThen {
			timer.SetThen(wake, then)
			armedAt, armedThen = wake, then
		}

		select {
		case <-ctx.Done():
			return nil
		case <-k.cancel:
			return nil
		case <-timer.C():
		case <-k.lease.Changes():
			checkWanted, checkAt = true, 0
		case t := <-k.ticks:
			tickWanted = &t
		case <-k.pause:
			paused = true
		case reply := <-k.resume:
			resuming, resumeBy = reply, k.clock.Now()+k.ttl/3
			if lostErr != nil {
				answer(lostErr)
			}
		case r := <-results:
			inflight = false
			wasResume := resumeOp
			resumeOp = false
			if errors.Is(r.err, store.ErrLost) {
				if !paused {
					return lost(r.err)
				}
				// Told to Resume, which stops the command for good
				// before the run ends: ending here would let the run
				// group continue the command to stop it gracefully.
				lostErr = lost(r.err)
				if wasResume {
					answer(lostErr)
				}
				continue
			}
			if wasResume && r.err != nil {
				if k.clock.Now() < expiry-k.reserve() {
					answer(nil) // still valid by the clock; retried as usual
				} else {
					answer(lost(fmt.Errorf("lease not confirmed after running again: %w", r.err)))
				}
			}
			if r.err != nil {
				k.log.Warn("lease operation failed; retrying", "op", r.kind, "error", r.err,
					"expires_in", (expiry - k.clock.Now()).Round(time.Millisecond))
				if r.kind == "renew" {
					nextRenew = r.sent + retry
				}
				if r.kind == "check" {
					// Retried, but not in a loop: renewals go on meanwhile,
					// and they see a revocation too.
					checkWanted, checkAt = true, r.sent+retry
				}
				continue
			}
			switch r.kind {
			case "renew":
				// Valid for the granted TTL from when the renewal was
				// sent, not answered.
				at := k.clock.Now()
				term := renewed(r, at)
				expiry = term.End()
				nextRenew = term.Start + term.TTL/3
				k.termMu.Lock()
				k.latest = term
				k.termMu.Unlock()
				traced := k.log.IsTrace()
				if traced {
					k.log.Trace("renewed", "valid_until_boottime_ns", int64(expiry))
				}
				if wasResume {
					answer(nil)
				}
				if !traced && !wasResume {
					// Nothing since could have waited (a log line on a
					// full pipe, Resume's caller): the loop's reading.
					known = at
				}
			case "check":
				reason := map[store.Request]Reason{store.RequestCancel: Cancelled, store.RequestHandover: Handover}[r.req]
				if reason != 0 && !asked {
					asked = true
					k.requests <- reason
				}
			}
		}
	}
}

// renewed is the term a successful renewal set. A Start the backend read
// outside the call (before it was sent, or in the future) cannot be right,
// and is replaced by the send time; a missing TTL means the lease is
// known valid no longer than at once.
func renewed(r opResult, now time.Duration) store.Term {
	t := r.term
	if t.Start < r.sent || t.Start > now {
		t.Start = r.sent
	}
	return t
}

// Renewed is the term the last successful renewal set, or the
// acquisition's before the first: whoever must know that the lease is
// being renewed (systemd's watchdog, N1) compares its Start with the
// clock. Safe from any goroutine.
func (k *Keeper) Renewed() store.Term {
	k.termMu.Lock()
	defer k.termMu.Unlock()
	return k.latest
}

// Pause tells the keeper that this process is about to stop itself with
// its command stopped (job control: a Ctrl-Z). Until Resume it neither
// renews nor lets its clock end the lease: a stopped process cannot renew,
// and its command does not run meanwhile. On the file backend a stopped
// holder keeps its key (S1); on another backend the lease may expire, and
// Resume tells. Call it while Run runs: it waits until Run has seen it.
func (k *Keeper) Pause() {
	select {
	case k.pause <- struct{}{}:
	case <-k.ended:
	}
}

// Resume, after Pause, renews the lease at once and returns nil if it is
// still held: the command may run again. Otherwise it returns an *EndError
// (Lost), and the caller must stop the command for good, without letting
// it run, before the run ends; the keeper itself goes on until it is
// interrupted, so that it is not what ends the run. No answer from the
// store within a third of the TTL counts as lost; a failing renewal counts
// as lost only if the lease is also past its local expiry.
func (k *Keeper) Resume(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case k.resume <- reply:
	case <-k.ended:
		return errNotKept
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case err := <-reply:
		return err
	case <-k.ended:
		return errNotKept
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// errNotKept answers Resume when Run already returned.
var errNotKept = &EndError{Reason: Lost, Err: errors.New("the keeper no longer runs")}

// Interrupt makes Run return nil. It is safe to call more than once, and
// after Run returned.
func (k *Keeper) Interrupt() { k.stop.Do(func() { close(k.cancel) }) }

// Lost waits (within ctx) for the store operation Run left in flight, as
// Release does, then reads the lease once and reports whether it is no
// longer this holder's (revoked, taken over). For a run whose command
// could not start: a start that failed because the lease was lost meanwhile
// (a release --force between the take and the start, whose next holder on
// this host removed this run's prepared cgroup among the revoked holder's
// leftovers) is a broken fence, not a command that could not run. Call it
// after Run returned and before Release.
func (k *Keeper) Lost(ctx context.Context) bool {
	if k.ran.Load() {
		select {
		case <-k.idle:
			k.idle <- struct{}{} // Release waits for it too
		case <-ctx.Done():
			return false
		}
	}
	_, err := k.lease.Check(ctx)
	return errors.Is(err, store.ErrLost)
}

// Release waits (within ctx) for the store operation Run left in flight,
// then releases the lease. Call it after Run returned and the command's tree
// is gone.
func (k *Keeper) Release(ctx context.Context) error { return k.release(ctx, k.lease.Release) }

// ReleaseDone is Release with id marked done (store.Lease.ReleaseDone):
// for a run whose command succeeded under the lease (--once).
func (k *Keeper) ReleaseDone(ctx context.Context, id string) error {
	return k.release(ctx, func(ctx context.Context) error { return k.lease.ReleaseDone(ctx, id) })
}

func (k *Keeper) release(ctx context.Context, release func(context.Context) error) error {
	if k.ran.Load() {
		select {
		case <-k.idle:
		case <-ctx.Done():
			return fmt.Errorf("fence: release: %w", context.Cause(ctx))
		}
	}
	done := make(chan error, 1)
	go func() { done <- release(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("fence: release: %w", context.Cause(ctx))
	}
}
