package resident

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// Role is the held resident role of one store: a store.Lease whose
// liveness is the kernel lock on the lock file. Key, Fence, Env, Changes and
// Predecessor are safe from any goroutine; the other methods are meant for
// one at a time (the keeper's) but are safe together too.
type Role struct {
	paths   paths
	fence   uint64
	ttl     time.Duration
	now     func() time.Time
	clock   func() time.Duration
	term    store.Term
	log     hclog.Logger
	pred    *store.Holder
	changes chan struct{}
	// requests receives when a handover or cancel request may have
	// arrived (the socket); answer judges it, then passes it on to changes.
	requests  chan struct{}
	closeSock func()        // closes the socket (notify_linux.go)
	held      roleClaims    // until the release (moved_linux.go)
	unwatch   chan struct{} // stops watchPath

	mu       sync.Mutex
	file     payloadFile // its fd holds flock(LOCK_EX) on the lock file
	p        payload
	handover bool   // a request was accepted: Check keeps saying so
	asker    string // the socket of the newcomer it was accepted from
	released bool
}

var _ store.Lease = (*Role)(nil)

// Key is the absolute path of the store file (FENCERUN_RESIDENT).
func (r *Role) Key() string { return r.paths.store }

// Fence is this acquisition's fencing token.
func (r *Role) Fence() uint64 { return r.fence }

// Slot is 0: a resident role has one holder.
func (r *Role) Slot() int { return 0 }

// Env is nil: the caller gives the command FENCERUN_RESIDENT and the rest.
func (r *Role) Env() []string { return nil }

// Term is the acquisition's: the kernel lock does not expire, so it is only
// the TTL from then, for the keeper's deadline.
func (r *Role) Term() store.Term { return r.term }

// Predecessor is the holder that died holding the role (its payload was
// left behind), with every tree still to stop (store.PredecessorOf), else
// nil.
func (r *Role) Predecessor() *store.Holder { return r.pred }

// LeftoversStopped forgets the dead holders' leftovers (see store.Lease).
// Until then they stay in the payload, so that a holder that dies, or
// releases, before stopping them passes them on.
func (r *Role) LeftoversStopped(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released || len(r.p.Leftovers) == 0 {
		return nil
	}
	r.p.Leftovers = nil
	return r.file.write(r.p)
}

// Changes receives when a handover request was judged, a cancel request
// arrived or the lock file was unlinked, renamed or replaced; the receiver
// then calls Check.
func (r *Role) Changes() <-chan struct{} { return r.changes }

// Renew checks that the role is still this holder's: the lock path still
// names the inode it holds locked. The kernel lock does not expire, so the
// returned Term is only TTL from before the check, for the keeper's
// deadline. It writes nothing.
func (r *Role) Renew(ctx context.Context) (store.Term, error) {
	start := r.clock()
	if err := r.verify(); err != nil {
		return store.Term{}, err
	}
	return store.Term{Start: start, TTL: r.ttl}, nil
}

// Check verifies the role as Renew does, then says what was asked of the
// holder: store.RequestHandover once it accepted a handover request (and
// from then on), store.RequestCancel for a cancel request naming its
// fence. It writes nothing: requests are judged as they arrive (answer).
func (r *Role) Check(ctx context.Context) (store.Request, error) {
	if err := r.verify(); err != nil {
		return store.RequestNone, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handover {
		return store.RequestHandover, nil
	}
	if cancelled(r.paths, r.fence) {
		return store.RequestCancel, nil
	}
	return store.RequestNone, nil
}

// answer judges each handover request as it arrives (R5), until the
// release, and then passes the news on to Changes, where the keeper calls
// Check. It accepts a request from a strictly newer build, for this
// holder, dated after its acquisition, from a live process: the payload
// then says handing_over, and Check returns store.RequestHandover. A
// request it refuses is answered in the payload (handover_refused), where
// the newcomer reads it at once. Each request is judged once (it is
// renamed away first); an unreadable one is ignored; none is judged once
// one was accepted, or while the role is not this holder's any more
// (Check says so).
func (r *Role) answer() {
	for {
		select {
		case <-r.unwatch:
			return
		case <-r.requests:
		}
		r.judgeRequest()
		select {
		case r.changes <- struct{}{}:
		default:
		}
	}
}

func (r *Role) judgeRequest() {
	if r.verify() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released || r.handover {
		return
	}
	q, err := takeRequest(r.paths.handover)
	if err != nil {
		r.log.Warn("ignoring an unreadable handover request", "error", err)
		return
	}
	if q == nil {
		return
	}
	if why := judge(*q, r.p); why != "" {
		r.log.Info("refused a handover request", "from_pid", q.PID, "from_host", q.Host, "reason", why)
		r.p.HandoverRefused = &refusalNote{ID: q.ID, Reason: why}
		if err := r.file.write(r.p); err != nil {
			r.log.Warn("could not answer a refused handover request; the newcomer waits for its handover-wait", "error", err)
		}
		poke(r.paths, q.Notify, r.log)
		return
	}
	r.log.Info("handing the role over to a newer build", "to_pid", q.PID, "to_host", q.Host,
		"build", describeBuild(&q.Build))
	r.handover, r.asker = true, q.Notify
	r.p.HandingOver = true
	if err := r.file.write(r.p); err != nil {
		r.log.Warn("could not mark the payload as handing over", "error", err)
	}
}

// Tick stamps last_tick at t in the payload. Only the holder has the
// payload's writing end; the caller (the keeper's tick socket) has already
// checked that the tick comes from the command (R6).
func (r *Role) Tick(ctx context.Context, t time.Time) error {
	if err := r.verify(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.LastTick = t
	return r.file.write(r.p)
}

// SetCommand records the command's own pid beside the holder's (status
// shows it as command_pid), its group and session (see store.Lease).
func (r *Role) SetCommand(_ context.Context, group, session store.ProcessID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil
	}
	r.p.CommandPID, r.p.Group, r.p.Session = group.ID, group, session
	return r.file.write(r.p)
}

// Release gives the role up: the payload is emptied, then the kernel lock
// dropped, and then the newcomer it hands over to and the standbys told. A standby or newcomer takes the role at once. Call it
// only after the command's processes are gone. Releasing twice, or a lost
// role, returns nil.
func (r *Role) Release(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil
	}
	r.released = true
	var err error
	// Leftovers not confirmed stopped stay: the payload is left as a dead
	// holder's, and the next holder stops its trees.
	if same, _ := sameFile(r.file.fd, r.paths.lock); same && len(r.p.Leftovers) == 0 {
		if err = r.file.clear(); err != nil {
			err = fmt.Errorf("resident: release: %w", err)
		}
	}
	close(r.unwatch)
	r.held.Release() // before the lock: the next holder must not wait on it
	unix.Flock(r.file.fd, unix.LOCK_UN)
	unix.Close(r.file.fd)
	r.closeSock()
	// Free now: wake the newcomer it hands over to and the standbys.
	poke(r.paths, r.asker, r.log)
	wakeStandbys(r.paths, r.log)
	r.log.Debug("released the role", "fence", r.fence)
	return err
}

// Ended does nothing: a resident role keeps no history (N2 is a key's).
func (r *Role) Ended(store.Ending) {}

// ReleaseDone is Release: a resident role has no done IDs (--once is for
// keys, and refused with --resident), so it marks nothing and says so.
func (r *Role) ReleaseDone(ctx context.Context, id string) error {
	return errors.Join(r.Release(ctx), errors.New("resident: a resident role keeps no done IDs"))
}

// verify: the role is still ours while the lock path names the inode we
// hold locked. Deleted or replaced, a newcomer could lock a new file.
func (r *Role) verify() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return fmt.Errorf("%w: %s: released", store.ErrLost, r.paths.lock)
	}
	same, err := sameFile(r.file.fd, r.paths.lock)
	if err != nil {
		return fmt.Errorf("resident: %w", err)
	}
	if !same {
		return fmt.Errorf("%w: %s no longer names the file this holder locked (deleted or replaced)", store.ErrLost, r.paths.lock)
	}
	return nil
}
