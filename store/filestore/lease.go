package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/stamps"
	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// Lease is a held lease of the file backend. It keeps the key's directory
// and its live file open, live locked, until Release: the lock is what
// tells everyone else the holder is alive, and the kernel drops it when the
// process dies, however it dies.
type Lease struct {
	s       *Store
	key     string
	fence   uint64
	token   string
	ttl     time.Duration
	clock   func() time.Duration
	term    store.Term // of the acquisition
	pred    *store.Holder
	changes chan struct{}
	notify  *notifier
	held    *unixsock.Claim // until the release (moved_linux.go)
	unwatch chan struct{}   // stops watchPath
	left    chan struct{}   // closed once our queue entry is removed (take)

	mu       sync.Mutex // one operation at a time; guards the fields below
	kd       dir
	live     int
	version  uint64 // of the record as this lease last wrote it
	released bool
	cmd      *holderRecord // the command's pid, group and session, for the next write (SetCommand)
	cgroup   bool          // the claim named a cgroup
	// cmdWritten: a write carried cmd; cmdTimer writes it otherwise.
	cmdWritten bool
	cmdTimer   *time.Timer
	// wrote is the record this lease last wrote and its bytes (readOwn).
	wrote     record
	wroteData []byte
}

var _ store.Lease = (*Lease)(nil)

func (l *Lease) Key() string                { return l.key }
func (l *Lease) Fence() uint64              { return l.fence }
func (l *Lease) Env() []string              { return nil }
func (l *Lease) Term() store.Term           { return l.term }
func (l *Lease) Changes() <-chan struct{}   { return l.changes }
func (l *Lease) Predecessor() *store.Holder { return copyHolder(l.pred) }

func copyHolder(h *store.Holder) *store.Holder {
	if h == nil {
		return nil
	}
	c := *h
	return &c
}

// LeftoversStopped forgets the predecessors' leftovers (see store.Lease).
func (l *Lease) LeftoversStopped(ctx context.Context) error {
	return l.update(ctx, func(r *record) { r.Leftovers = nil })
}

// SetCommand records the command's group and session (see store.Lease).
// With a cgroup, which finds the tree exactly, they are kept for the next
// write, and written within commandPIDDelay if nothing else did: an
// uncontended run of a short command stays at one record write (P1), and
// status shows the command's pid of a long one within a second. Without a
// cgroup they are written at once: a holder killed before then must not
// leave its process group unrecorded.
func (l *Lease) SetCommand(ctx context.Context, group, session store.ProcessID) error {
	l.mu.Lock()
	l.cmd = &holderRecord{CommandPID: group.ID, Group: group, Session: session}
	deferred := l.cgroup
	if deferred && l.cmdTimer == nil && !l.released {
		l.cmdTimer = time.AfterFunc(commandPIDDelay, func() {
			l.mu.Lock()
			written := l.cmdWritten
			l.mu.Unlock()
			if !written {
				// A lost lease says so to the keeper at its next check.
				_ = l.update(context.Background(), func(*record) {})
			}
		})
	}
	l.mu.Unlock()
	if deferred {
		return nil
	}
	return l.update(ctx, func(*record) {})
}

// commandPIDDelay is how long SetCommand leaves the pid for another
// write to carry.
const commandPIDDelay = 500 * time.Millisecond

// Renew extends the lease by its TTL from now (see store.Lease): the Term
// starts just before the record with the new expiry is written.
func (l *Lease) Renew(ctx context.Context) (store.Term, error) {
	var term store.Term
	err := l.update(ctx, func(r *record) {
		term = store.Term{Start: l.clock(), TTL: l.ttl}
		r.Holder.Expires = l.s.now().Add(l.ttl)
	})
	return term, err
}

// Tick records a liveness tick at t (see store.Lease).
func (l *Lease) Tick(ctx context.Context, t time.Time) error {
	return l.update(ctx, func(r *record) { r.Holder.LastTick = t })
}

// update is the compare-and-swap every holder write goes through: under
// the guard, the record must still carry this lease's token and the
// version it last wrote.
func (l *Lease) update(ctx context.Context, change func(*record)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: the lease on %q (fence %d) was released", store.ErrLost, l.key, l.fence)
	}
	g, err := l.s.lockGuard(ctx, l.kd, true, unix.LOCK_EX, "the holder's write", nil)
	if err != nil {
		return err
	}
	defer unix.Close(g)
	// One open of the record for its read and its write.
	fd, f, err := l.kd.OpenSlotted(leaseFile)
	if fd >= 0 {
		defer unix.Close(fd)
	}
	rec, cur, err := l.recordOf(f, err)
	if err := l.owns(rec, err); err != nil {
		return err
	}
	if err := l.stillThere(); err != nil {
		return err // moved or deleted: never write a record nobody reads
	}
	change(&rec)
	if c := l.cmd; c != nil {
		rec.Holder.CommandPID, rec.Holder.Group, rec.Holder.Session = c.CommandPID, c.Group, c.Session
		l.cmdWritten = true
	}
	rec.Version++
	data := rec.marshal()
	l.wroteData = nil
	if fd < 0 {
		err = l.kd.WriteSlotted(leaseFile, cur, data, false)
	} else {
		err = l.kd.WriteSlottedFD(fd, leaseFile, cur, data)
	}
	if err != nil {
		// A write cut short may still have landed whole, where the bytes
		// it missed were there already: then it is this lease's record.
		if now, _, rerr := readRecord(l.kd); rerr != nil || now.Token != l.token || now.Version != rec.Version {
			return err
		}
	}
	l.version = rec.Version
	l.wrote, l.wroteData = rec.clone(), data
	return nil
}

// readOwn is readRecord for this lease's own operations (under the guard):
// where the record file's newest valid slot holds exactly the bytes this
// lease last wrote, the record is the one it wrote, which is not decoded
// again. The same bytes always parse to the same record, so this changes
// nothing but the cost: decoding the JSON was about a seventh of a holder's
// CPU per renewal (P4, docs/DESIGN.md).
func (l *Lease) readOwn() (record, statefs.Slotted, error) {
	f, err := l.kd.ReadSlotted(leaseFile)
	return l.recordOf(f, err)
}

// recordOf is readOwn of f, the record file as read with err.
func (l *Lease) recordOf(f statefs.Slotted, err error) (record, statefs.Slotted, error) {
	if err == nil && l.wroteData != nil && bytes.Equal(f.Data, l.wroteData) {
		return l.wrote.clone(), f, nil
	}
	return recordFrom(l.kd, f, err)
}

// owns says whether rec (read with err) is still this lease's, as of its
// last write; if not, why, in an error wrapping store.ErrLost. A record that
// cannot be parsed is lost too: nothing in it can prove the lease ours.
func (l *Lease) owns(rec record, err error) error {
	if err != nil {
		if errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrUnsafe) {
			return fmt.Errorf("%w: %w", store.ErrLost, err)
		}
		return err
	}
	switch {
	case rec.Token == l.token && rec.Version == l.version:
		return nil
	case rec.Token == l.token:
		return fmt.Errorf("%w: the record of %q (fence %d) was changed by someone else", store.ErrLost, l.key, l.fence)
	case rec.Revoked && rec.Fence == l.fence:
		return fmt.Errorf("%w: the lease on %q (fence %d) was revoked", store.ErrLost, l.key, l.fence)
	case rec.Fence > l.fence:
		return fmt.Errorf("%w: the lease on %q (fence %d) was taken over with fence %d", store.ErrLost, l.key, l.fence, rec.Fence)
	default:
		return fmt.Errorf("%w: the lease on %q (fence %d) is no longer in its record", store.ErrLost, l.key, l.fence)
	}
}

// Check reads the record without writing (see store.Lease), under the
// guard shared. A cancel file
// that cannot be read is logged and ignored: it is a request, not the lease.
func (l *Lease) Check(ctx context.Context) (store.Request, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return store.RequestNone, fmt.Errorf("%w: the lease on %q (fence %d) was released", store.ErrLost, l.key, l.fence)
	}
	if err := l.stillThere(); err != nil {
		return store.RequestNone, err
	}
	// Shared, so that no write in place is half done as we read.
	g, err := l.s.lockGuard(ctx, l.kd, true, unix.LOCK_SH, "the holder's check", nil)
	if err != nil {
		return store.RequestNone, err
	}
	defer unix.Close(g)
	rec, _, err := l.readOwn()
	if err := l.owns(rec, err); err != nil {
		return store.RequestNone, err
	}
	data, err := l.kd.ReadFile(cancelFile)
	if errors.Is(err, fs.ErrNotExist) {
		return store.RequestNone, nil
	}
	if err != nil {
		l.s.log.Warn("ignoring a cancel request that cannot be read", "key", l.key, "error", err)
		return store.RequestNone, nil
	}
	fence, ok := parseCancel(data)
	if !ok {
		l.s.log.Warn("ignoring a cancel request that is not a fence", "path", l.kd.Join(cancelFile))
		return store.RequestNone, nil
	}
	if fence == l.fence {
		return store.RequestCancel, nil
	}
	return store.RequestNone, nil
}

// Release gives the lease up (see store.Lease): a free record keeping the
// fence, the cancel request removed, then live unlocked while the guard is
// still held. Unlocking live wakes the head waiter, which reads the free
// record as soon as the guard is let go. A revoked holder acknowledges its
// revocation the same way, which tells the next holder there is nothing of
// it left to stop. Releasing a lost lease only drops the lock.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	l.released = true
	stamps.Mark("release")
	<-l.left // our queue entry is gone before the lease is
	if l.cmdTimer != nil {
		l.cmdTimer.Stop()
	}
	close(l.unwatch)
	defer func() {
		l.notify.stop(true)
		l.kd.Close()
	}()
	g, err := l.s.lockGuard(ctx, l.kd, true, unix.LOCK_EX, "the holder's release", nil)
	if err != nil {
		// Dropping live alone leaves our record to look like a dead
		// holder's: the next Acquire takes it over.
		l.held.Release()
		unix.Close(l.live)
		return err
	}
	rec, cur, err := l.readOwn()
	var werr error
	switch {
	case err != nil:
		l.s.log.Warn("releasing a lease whose record cannot be read", "key", l.key, "error", err)
	case rec.Token == l.token, rec.Revoked && rec.Holder != nil && rec.Fence == l.fence:
		// Leftovers not confirmed stopped stay for the next holder.
		free := record{Fence: rec.Fence, Version: rec.Version + 1, Leftovers: rec.Leftovers}
		werr = writeRecord(l.kd, cur, &free)
		if err := unix.Unlinkat(l.kd.FD, cancelFile, 0); err != nil && err != unix.ENOENT {
			l.s.log.Warn("cannot remove the cancel request", "path", l.kd.Join(cancelFile), "error", err)
		}
	}
	stamps.Mark("release.written")
	l.held.Release() // before live: the next holder must not wait on it
	unix.Close(l.live)
	stamps.Mark("release.unlocked")
	unix.Close(g)
	l.s.log.Debug("released", "key", l.key, "fence", l.fence)
	return werr
}
