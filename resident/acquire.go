package resident

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// Defaults of `run --resident` (CONTRACT.md).
const (
	DefaultStuckAfter   = 5 * time.Minute
	DefaultHandoverWait = 30 * time.Second
)

// Claim says who asks for the resident role.
type Claim struct {
	// Name, Reason, TTL (only the expiry Renew reports), Wait (standby,
	// R8) and Marker as for a keyed lease.
	store.Claim
	// Build is the command's executable (BuildOf); it decides handover.
	Build store.Build
	// StuckAfter is recorded in the payload so that status can say stuck;
	// 0: never stuck. The watchdog that acts on it is package fence's.
	StuckAfter time.Duration
	// NoHandover: never ask an older holder to hand over.
	NoHandover bool
	// HandoverWait bounds the wait for a holder that was asked to hand
	// over; 0 means DefaultHandoverWait. It should exceed the holder's grace.
	HandoverWait time.Duration
	// Logger is the root logger; Acquire logs under "resident". nil: none.
	Logger hclog.Logger
	// Now stamps acquired_at and requested_at; nil: time.Now.
	Now func() time.Time
}

// RefusalReason says why the role was not acquired.
type RefusalReason string

const (
	// ReasonHeld: held by a process that has not announced itself (the
	// lock is taken but the payload names no live holder: flock(1) by hand
	// on the lock file, or a holder that has been starting for over 2s).
	ReasonHeld RefusalReason = "held"
	// ReasonNotNewer: this build is not strictly newer than the holder's.
	ReasonNotNewer RefusalReason = "not newer"
	// ReasonNoHandover: this build is newer, but NoHandover was asked for.
	ReasonNoHandover RefusalReason = "no-handover"
	// ReasonRefused: the holder judged the handover request and refused it;
	// Detail has its words.
	ReasonRefused RefusalReason = "refused by holder"
	// ReasonHandoverTimedOut: the holder did not hand over within
	// HandoverWait.
	ReasonHandoverTimedOut RefusalReason = "handover timed out"
)

// Refusal is the result of an Acquire that did not get the role: who holds
// it, and why it was not handed over. Contention is a result, not an error.
type Refusal struct {
	Store  string       // absolute path of the store file
	Holder store.Holder // PID 0 when the holder has not announced itself
	Reason RefusalReason
	Detail string // more on Reason, for people
}

// String is the refusal as one line for people: which pid holds the role,
// on which host, with which build, since when, and why not this one.
func (r *Refusal) String() string {
	s := fmt.Sprintf("resident role of %s is held by %s: %s", r.Store, describeHolder(&r.Holder), r.Reason)
	if r.Detail != "" {
		s += " (" + r.Detail + ")"
	}
	return s
}

func describeHolder(h *store.Holder) string {
	if h == nil || h.PID == 0 {
		return "a process that has not announced itself"
	}
	s := fmt.Sprintf("pid %d", h.PID)
	if h.Name != "" {
		s += " (" + store.Printable(h.Name) + ")"
	}
	return s + fmt.Sprintf(" on host %s, %s, fence %d, since %s",
		store.Printable(h.Host), describeBuild(h.Build), h.Fence, h.Acquired.Format(time.RFC3339))
}

// Acquire takes the resident role of the store at storePath (which need
// not exist; its directory must).
//
// When the role is held by a live process, a newcomer whose Build is
// strictly newer (and not NoHandover) asks the holder to hand over and
// waits up to HandoverWait for the role. Otherwise, or when the holder
// refuses or does not hand over in time: with Wait false, Acquire returns
// (nil, refusal, nil); with Wait true it waits as a standby and takes the
// role the moment it is free, until ctx ends, and then returns an error
// wrapping context.Cause(ctx) whose message names the holder.
//
// A held role whose payload cannot be read fails closed with an error
// wrapping store.ErrCorrupt naming the lock file; a symlink in place of a
// file is store.ErrUnsafe.
func Acquire(ctx context.Context, storePath string, c Claim) (*Role, *Refusal, error) {
	p, err := pathsOf(storePath)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case c.TTL < 0:
		return nil, nil, fmt.Errorf("resident: negative ttl %v", c.TTL)
	case c.StuckAfter < 0:
		return nil, nil, fmt.Errorf("resident: negative stuck-after %v", c.StuckAfter)
	case c.HandoverWait < 0:
		return nil, nil, fmt.Errorf("resident: negative handover-wait %v", c.HandoverWait)
	}
	if c.HandoverWait == 0 {
		c.HandoverWait = DefaultHandoverWait
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Clock == nil {
		c.Clock = boottime.Now // the waits run on it, as the keeper does
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	a := &attempt{c: c, pid: os.Getpid(), host: hostname(), p: p, fd: -1, log: c.Logger.Named("resident").With("store", p.store)}
	defer a.close()
	return a.run(ctx)
}

// Timing of the wait. settleFor bounds how long a lock held by nobody live
// (a role being taken or released, a prober's brief lock) is given to
// settle before it is reported. safetyNet bounds any sleep, for unlocks no
// event announces.
const (
	settleFor = 2 * time.Second
	safetyNet = time.Second
	// standbyWait: a standby sleeps until the holder's release, answer or
	// exit, with no timeout of its own (safetyNet for a holder elsewhere).
	standbyWait = time.Duration(-1)
)

// attempt is one Acquire.
type attempt struct {
	c    Claim
	pid  int    // this process: the holder's pid
	host string // and host
	p    paths
	log  hclog.Logger
	fd   int     // the lock file, open while trying; -1 when not
	w    *waiter // created on the first wait

	holder *store.Holder // last live holder seen
	// sawLive: a holder's claim was held with its files gone (moved or
	// removed, or reached by another name): the fence stays above it.
	sawLive bool

	// The handover request sent, if any: to the holder with fence asked.
	reqID    string
	asked    uint64
	pending  bool          // no answer yet
	reqUntil time.Duration // on c.Clock

	standbyFor uint64       // fence of the holder the standby log line was for
	standby    *standbyFile // shown as a waiter by Status while waiting

	settling  bool          // a locked role has no live holder recorded
	unsettled time.Duration // since when, on c.Clock
	pause     time.Duration // the next look at an unsettled lock
}

// outcome ends an Acquire when any of its fields is set; a zero outcome
// is "look again".
type outcome struct {
	role    *Role
	refusal *Refusal
	err     error
}

func (o outcome) done() bool { return o.role != nil || o.refusal != nil || o.err != nil }

func (a *attempt) run(ctx context.Context) (*Role, *Refusal, error) {
	a.pause = time.Millisecond
	for {
		if ctx.Err() != nil {
			return nil, nil, a.gaveUp(ctx)
		}
		got, err := a.lock()
		if err != nil {
			return nil, nil, err
		}
		var o outcome
		if got {
			o = a.takeLocked(ctx)
		} else {
			o = a.lookAtHolder(ctx)
		}
		if o.done() {
			return o.role, o.refusal, o.err
		}
	}
}

// takeLocked takes the role whose lock we got, unless a holder whose lock
// file was moved or unlinked still runs: it stops within a second, and
// its claim goes with its tree.
func (a *attempt) takeLocked(ctx context.Context) outcome {
	c, busy, err := takeClaim(a.p, a.log)
	if err != nil {
		return outcome{err: err}
	}
	if busy == "" {
		role, err := a.take(c)
		if err != nil {
			c.Release()
			return outcome{err: err}
		}
		return outcome{role: role}
	}
	a.closeFile()
	a.sawLive = true
	if !a.c.Wait {
		return outcome{refusal: a.refuse(store.Holder{}, ReasonHeld, busy)}
	}
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
	return outcome{}
}

// lookAtHolder reads who holds the locked role and decides: ask it to
// hand over, wait as a standby, or give up.
func (a *attempt) lookAtHolder(ctx context.Context) outcome {
	// Watch before reading: whatever changes after the read wakes us.
	if err := a.watch(ctx); err != nil {
		return outcome{err: err}
	}
	pl, empty, err := readPayload(a.fd, a.p.lock)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return outcome{err: fmt.Errorf("resident: %w", err)}
	}
	if empty || err != nil || !alive(pl.PID, pl.Host) {
		return a.settle(ctx, pl, empty, err)
	}
	a.settling, a.pause = false, time.Millisecond
	wait, ref, err := a.decide(pl)
	if ref != nil || err != nil {
		return outcome{refusal: ref, err: err}
	}
	if a.announceStandby(pl) {
		// Registered just now: a release before that told nobody, so
		// look again before sleeping; one after it wakes us.
		return outcome{}
	}
	if !a.w.follow(pl.PID, pl.Host) {
		return outcome{} // it just exited: look again, without waiting
	}
	if wait < 0 && !a.w.following() {
		wait = safetyNet // nothing tells of the exit of a holder elsewhere
	}
	return outcome{err: a.sleep(ctx, wait)}
}

// settle deals with a lock held with no live holder announced: the role
// is being taken or released, a prober holds the lock for an instant, or
// the payload is corrupt. It is given settleFor to become one or the
// other, looked at again ever later.
func (a *attempt) settle(ctx context.Context, pl payload, empty bool, corrupt error) outcome {
	if !a.settling {
		a.settling, a.unsettled = true, a.c.Clock()
	}
	if a.c.Clock()-a.unsettled >= settleFor {
		if corrupt != nil && !empty {
			return outcome{err: corrupt} // S6: never start on what cannot be read
		}
		if !a.c.Wait {
			var h store.Holder
			if !empty {
				h = *pl.holder()
				h.Marker = ""
			}
			return outcome{refusal: a.refuse(h, ReasonHeld, "the lock is taken but no live holder is recorded")}
		}
	}
	if err := a.sleep(ctx, a.pause); err != nil {
		return outcome{err: err}
	}
	a.pause = min(2*a.pause, safetyNet)
	return outcome{}
}

// announceStandby registers us as a standby, the first time (status shows
// us, and the holder's release wakes us), and logs, once per holder, that
// we wait as its standby. It reports whether it registered us now.
func (a *attempt) announceStandby(pl payload) bool {
	if a.pending || a.standbyFor == pl.Fence {
		return false
	}
	registered := false
	if a.standby == nil {
		var err error
		a.standby, err = register(a.p, standby{PID: a.pid, Host: a.host, Name: a.c.Name, Reason: a.c.Reason, Since: a.c.Now(), Notify: a.w.name()})
		if err != nil {
			a.log.Warn("cannot show this standby in status; only the holder's exit will wake it", "error", err)
		}
		registered = err == nil
	}
	a.standbyFor = pl.Fence
	a.log.Info("waiting as a standby", "holder_pid", pl.PID, "holder_host", pl.Host, "fence", pl.Fence)
	return registered
}

// decide what to do about the live holder of pl: ask it to hand over, keep
// waiting for its answer, wait as a standby (for at most the returned
// duration, before looking again), or give up with a refusal.
func (a *attempt) decide(pl payload) (time.Duration, *Refusal, error) {
	h := pl.holder()
	h.Marker = ""
	a.holder = h
	if a.pending && a.asked != pl.Fence {
		a.pending = false // the holder we asked is gone
	}
	newer := isNewer(a.c.Build, pl.Build)
	switch {
	case a.pending:
		if r := pl.HandoverRefused; r != nil && r.ID == a.reqID {
			a.pending = false
			if !a.c.Wait {
				return 0, a.refuse(*h, ReasonRefused, r.Reason), nil
			}
			a.log.Info("the holder refused to hand over; waiting as a standby", "holder_pid", pl.PID, "reason", r.Reason)
			return standbyWait, nil, nil
		}
		left := a.reqUntil - a.c.Clock()
		if left > 0 {
			return min(safetyNet, left), nil, nil
		}
		a.pending = false
		if !a.c.Wait {
			detail := fmt.Sprintf("asked to hand over, it did not within %v", a.c.HandoverWait)
			return 0, a.refuse(*h, ReasonHandoverTimedOut, detail), nil
		}
		a.log.Info("the holder did not hand over in time; waiting as a standby", "holder_pid", pl.PID)
	case a.asked != pl.Fence && newer && !a.c.NoHandover:
		if err := a.ask(pl); err != nil {
			return 0, nil, err
		}
		return min(safetyNet, a.c.HandoverWait), nil, nil
	case !a.c.Wait && newer:
		return 0, a.refuse(*h, ReasonNoHandover, "this build is newer, but --no-handover was given"), nil
	case !a.c.Wait:
		return 0, a.refuse(*h, ReasonNotNewer, notNewer(a.c.Build, pl.Build)), nil
	}
	return standbyWait, nil, nil
}

// lock tries the kernel lock without blocking, on the file the lock path
// names now: a lock won (or lost) on an inode that was since unlinked or
// replaced says nothing about the role, so the file is reopened.
func (a *attempt) lock() (bool, error) {
	for {
		if a.fd < 0 {
			fd, err := openLock(a.p.lock)
			if err != nil {
				return false, fmt.Errorf("resident: %w", err)
			}
			a.fd = fd
		}
		err := unix.Flock(a.fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == unix.EINTR {
			continue
		}
		if err != nil && err != unix.EWOULDBLOCK {
			return false, fmt.Errorf("resident: %w", &os.PathError{Op: "flock", Path: a.p.lock, Err: err})
		}
		same, serr := sameFile(a.fd, a.p.lock)
		if serr != nil {
			a.closeFile()
			return false, fmt.Errorf("resident: %w", serr)
		}
		if same {
			return err == nil, nil
		}
		a.closeFile()
	}
}

// take makes the locked file the role: the next fence recorded, the holder's
// watch set up, then the payload written over whatever a dead holder left.
func (a *attempt) take(c roleClaims) (*Role, error) {
	fd := a.fd
	// Nobody else writes this file while we hold the lock: no range lock.
	data, err := statefs.ReadFD(fd, a.p.lock)
	if err != nil {
		return nil, fmt.Errorf("resident: %w", err)
	}
	var pred *store.Holder
	var staleFence uint64
	var leftovers []store.Leftover
	stale, empty, err := decodePayload(data, a.p.lock)
	switch {
	case err != nil:
		// Fail closed, as for keys (S6, B4): what cannot be read may name
		// a dead holder's leftovers. release --resident PATH --force clears it.
		return nil, fmt.Errorf("%w (release --resident %s --force clears it)", err, a.p.store)
	case !empty:
		staleFence, leftovers = stale.Fence, stale.trees()
		pred = store.PredecessorOf(stale.holder(), leftovers)
		a.log.Info("the previous holder died holding the role", "pid", stale.PID, "host", stale.Host, "fence", stale.Fence)
	}
	fence, err := nextFence(a.p, staleFence, a.sawLive)
	if err != nil {
		return nil, err
	}
	if !empty {
		removeSocket(a.p, stale.Notify) // the dead holder's
	}
	changes, requests := make(chan struct{}, 1), make(chan struct{}, 1)
	// Listen before announcing: any request for this fence comes after.
	sock, closeSock, err := listenBeside(a.p)
	if err != nil {
		return nil, err
	}
	sock.Notify(requests, func(err error) {
		a.log.Error("listening for requests stopped; they will be seen at the next renewal", "error", err)
	})
	clock := a.c.Clock
	r := &Role{
		paths: a.p, fence: fence, ttl: a.c.TTL, now: a.c.Now, pred: pred,
		clock: clock, term: store.Term{Start: clock(), TTL: a.c.TTL},
		changes: changes, requests: requests, closeSock: closeSock, held: c, unwatch: make(chan struct{}),
		log:  a.log.With("fence", fence),
		file: openPayloadFile(fd, a.p.lock, data),
		p: payload{
			Schema: schema, PID: a.pid, Host: a.host, Surface: a.c.Name, Reason: a.c.Reason,
			AcquiredAt: a.c.Now(), Store: a.p.store, StuckAfter: duration(a.c.StuckAfter),
			Build: a.c.Build, Fence: fence, Marker: a.c.Marker, Cgroup: a.c.Cgroup, Leftovers: leftovers,
			Notify: sock.Name(),
		},
	}
	if err := r.file.write(r.p); err != nil {
		closeSock()
		return nil, fmt.Errorf("resident: announce: %w", err)
	}
	a.fd = -1 // the role's now
	if a.reqID != "" {
		withdrawRequest(a.p.handover, a.reqID)
	}
	// A request left behind (for an earlier holder) or already sent for
	// this one: let answer judge it. A datagram may have filled the
	// one-slot channel already; requests coalesce.
	if _, err := os.Lstat(a.p.handover); err == nil {
		select {
		case requests <- struct{}{}:
		default:
		}
	}
	go r.answer()
	go r.watchPath()
	r.log.Debug("took the role", "pid", a.pid)
	return r, nil
}

// ask sends a handover request to the holder of pl.
func (a *attempt) ask(pl payload) error {
	a.reqID, a.asked, a.pending = randomID(), pl.Fence, true
	a.reqUntil = a.c.Clock() + a.c.HandoverWait
	a.log.Info("asking the holder to hand over to a newer build", "holder_pid", pl.PID,
		"holder_build", describeBuild(&pl.Build), "build", describeBuild(&a.c.Build))
	return sendRequest(a.p, request{
		Schema: schema, ID: a.reqID, PID: a.pid, Host: a.host, Surface: a.c.Name,
		Build: a.c.Build, RequestedAt: a.c.Now(), Fence: pl.Fence, Notify: a.w.name(),
	}, pl.Notify, a.log)
}

// watch sets up the waiter, once.
func (a *attempt) watch(ctx context.Context) error {
	if a.w != nil {
		return nil
	}
	w, err := newWaiter(ctx, a.p)
	if err != nil {
		return err
	}
	a.w = w
	return nil
}

// sleep waits for a change, d at most.
func (a *attempt) sleep(ctx context.Context, d time.Duration) error {
	if err := a.w.wait(d); err != nil {
		if ctx.Err() != nil {
			return a.gaveUp(ctx)
		}
		return err
	}
	return nil
}

func (a *attempt) refuse(h store.Holder, why RefusalReason, detail string) *Refusal {
	return &Refusal{Store: a.p.store, Holder: h, Reason: why, Detail: detail}
}

func (a *attempt) gaveUp(ctx context.Context) error {
	return fmt.Errorf("resident: stopped waiting for the role of %s, held by %s: %w",
		a.p.store, describeHolder(a.holder), context.Cause(ctx))
}

func (a *attempt) closeFile() {
	if a.fd >= 0 {
		unix.Flock(a.fd, unix.LOCK_UN)
		unix.Close(a.fd)
		a.fd = -1
	}
}

func (a *attempt) close() {
	a.closeFile()
	a.standby.remove()
	if a.w != nil {
		a.w.shutdown()
	}
}

func orUnknown(path string) string {
	if path == "" {
		return "unknown"
	}
	return store.Printable(path)
}

// notNewer says why build b is not newer than the holder's.
func notNewer(b, holder store.Build) string {
	switch {
	case !isStamped(b):
		return "this build is unstamped"
	case !isStamped(holder):
		return "the holder's build is unstamped"
	case b.Path != holder.Path:
		return fmt.Sprintf("a different program (%s) from the holder's (%s): only a build of the same program can take over by handover", orUnknown(b.Path), orUnknown(holder.Path))
	case Same(b, holder):
		return "the same build"
	case b.ModTime.Equal(holder.ModTime):
		return fmt.Sprintf("a different build (%s) with the same mtime as the holder's (%s): neither is newer",
			describeBuild(&b), describeBuild(&holder))
	}
	return fmt.Sprintf("%s is older than the holder's %s", describeBuild(&b), describeBuild(&holder))
}
