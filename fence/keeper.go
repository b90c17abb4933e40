// Package fence is the lease keeper and the watchdog: it keeps a held lease
// alive and says, with a typed reason, when the command running under it
// must stop. (Package fenced runs a whole command under a lease with it.)
// Its clock is package boottime's; the tick socket is package ticksock's.
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

	"github.com/fencerun/fencerun/internal/boottime"
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
	Clock  boottime.Clock // nil: boottime.Kernel
	Logger hclog.Logger
}

// Keeper keeps one lease. Create it with New after the lease was acquired
// (its clock starts from the lease's Term, not from New); run it as an
// actor of the run group.
type Keeper struct {
	lease    store.Lease
	ttl      time.Duration
	grace    time.Duration
	clock    boottime.Clock
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
		c.Clock = boottime.Kernel{}
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

// Run keeps the lease until ctx ends or Interrupt is called (returning nil),
// or the command must stop (returning *EndError). Store operations run one at
// a time in a goroutine of their own, so a store that hangs (a guard lock held by
// someone else, a wedged disk) never keeps the keeper from giving up in time.
func (k *Keeper) Run(ctx context.Context) error {
	if !k.ran.CompareAndSwap(false, true) {
		return errors.New("fence: keeper run twice")
	}
	defer close(k.ended)
	timer, err := k.clock.NewTimer()
	if err != nil {
		k.idle <- struct{}{}
		return err
	}
	defer timer.Close()
	l := newLoop(ctx, k, timer)
	defer l.finish()
	return l.run()
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
// (a release --force between the take and the start) is a broken fence,
// not a command that could not run. Call it
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
