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
		log:   c.Logger,
		term:  c.Lease.Term(),
		ticks: make(chan time.Time, 1), requests: make(chan Reason, 1), cancel: make(chan struct{}),
		idle: make(chan struct{}, 1),
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
// a time in their own goroutine, so a store that hangs (a guard lock held by
// someone else, a wedged disk) never keeps the keeper from giving up in time.
func (k *Keeper) Run(ctx context.Context) error {
	if !k.ran.CompareAndSwap(false, true) {
		return errors.New("fence: keeper run twice")
	}
	var inflight bool
	results := make(chan opResult, 1)
	defer func() {
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
	)
	start := func(kind string, op func(ctx context.Context) (store.Term, store.Request, error)) {
		inflight = true
		sent := k.clock.Now()
		go func() {
			term, req, err := op(ctx)
			if err != nil {
				k.log.Trace("store call", "call", kind, "took", logfield.Duration(k.clock.Now()-sent), "error", err)
			} else {
				k.log.Trace("store call", "call", kind, "took", logfield.Duration(k.clock.Now()-sent))
			}
			results <- opResult{kind: kind, sent: sent, term: term, req: req, err: err}
		}()
	}
	lost := func(err error) error {
		return &EndError{Reason: Lost, StopBy: expiry - k.margin(), Err: err}
	}

	k.log.Trace("keeping the lease", "valid_until_boottime_ns", int64(expiry))
	for {
		now := k.clock.Now()
		if now >= expiry-k.reserve() {
			return lost(fmt.Errorf("lease not renewed within %v of its expiry", k.reserve()))
		}
		if !inflight {
			switch {
			case checkWanted && now >= checkAt:
				checkWanted = false
				start("check", func(ctx context.Context) (store.Term, store.Request, error) {
					req, err := k.lease.Check(ctx)
					return store.Term{}, req, err
				})
			case now >= nextRenew:
				start("renew", func(ctx context.Context) (store.Term, store.Request, error) {
					term, err := k.lease.Renew(ctx)
					return term, store.RequestNone, err
				})
			case tickWanted != nil:
				t := *tickWanted
				tickWanted = nil
				start("tick", func(ctx context.Context) (store.Term, store.Request, error) {
					return store.Term{}, store.RequestNone, k.lease.Tick(ctx, t)
				})
			}
		}
		wake := expiry - k.reserve()
		if !inflight {
			wake = min(wake, nextRenew)
			if checkWanted {
				wake = min(wake, checkAt)
			}
		}
		timer.Set(wake)

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
		case r := <-results:
			inflight = false
			if errors.Is(r.err, store.ErrLost) {
				return lost(r.err)
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
				term := renewed(r, k.clock.Now())
				expiry = term.End()
				nextRenew = term.Start + term.TTL/3
				k.log.Trace("renewed", "valid_until_boottime_ns", int64(expiry))
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

// Interrupt makes Run return nil. It is safe to call more than once, and
// after Run returned.
func (k *Keeper) Interrupt() { k.stop.Do(func() { close(k.cancel) }) }

// Release waits (within ctx) for the store operation Run left in flight,
// then releases the lease. Call it after Run returned and the command's tree
// is gone.
func (k *Keeper) Release(ctx context.Context) error {
	if k.ran.Load() {
		select {
		case <-k.idle:
		case <-ctx.Done():
			return fmt.Errorf("fence: release: %w", context.Cause(ctx))
		}
	}
	done := make(chan error, 1)
	go func() { done <- k.lease.Release(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("fence: release: %w", context.Cause(ctx))
	}
}
