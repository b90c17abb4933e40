package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/notify"
	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// Lease is a held lease of the file backend, in one slot of its key
// (holders.go). It keeps the key's directory, its slot's and the slot's
// live file open, live locked, until Release: the lock is what tells
// everyone else the holder is alive, and the kernel drops it when the
// process dies, however it dies. Every holder of a key, whatever its
// slot, is this code on its slot's directory (sd): the guard, done IDs
// and history are the key's (kd).
//
// Its renewals and ticks are compare-and-swaps on the record's secret
// token and version, through the guard and record it keeps open from its
// take to its release, each one write in place into the older of the
// record's two slots. They are not fsynced: a crash may lose a renewal,
// tick or release, which after the reboot reads as a dead holder's record
// and is taken over at once, which is the truth.
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
	notify  *notify.Listener
	held    *unixsock.Claim // until the release (moved_linux.go)
	unwatch chan struct{}   // stops watchPath
	left    chan struct{}   // closed once our queue entry is removed (take)

	endMu  sync.Mutex
	ending *store.Ending // how the holding ended (Ended), written with the release

	mu       sync.Mutex // one operation at a time; guards the fields below
	kd       dir        // the key's directory: guard, done, history
	sd       dir        // the slot's: lease, live, cancel, notify (kd for slot 0)
	slot     int
	kind     store.Kind
	live     int
	version  uint64 // of the record as this lease last wrote it
	released bool
	// leftoversGone: LeftoversStopped was called; the release forgets
	// the record's leftovers too.
	leftoversGone bool
	cmd           *holderRecord // the command's pid, group and session, for the next write (SetCommand)
	cgroup        bool          // the claim named a cgroup
	// cmdWritten: a write carried cmd; cmdTimer writes it otherwise.
	cmdWritten bool
	cmdTimer   *time.Timer
	// The key's guard and record as the lease was taken under them, the
	// descriptors its take locked and wrote through, kept open to its
	// release: a renewal, and the release, is a flock, a pread and a
	// pwrite on them, and a stat of each name (stillThere), no open.
	guard, record keptFile
	unlockKept    func() // unlocks guard (lockKeptGuard)
	// held: the key directory and live as open, looked at once (stillThere).
	heldDir, heldLive, heldSlot statefs.FileID
	heldKnown                   bool
	keyPath                     string // the key directory's path, by which it is looked at
}

// keptFile is a file of the key's directory that a lease keeps open for
// its writes, from its take to its release: fd, and id, which file it is
// (the one the lease was taken under, or last wrote whole itself). Open,
// it cannot be freed, so no other file can come to have its id.
type keptFile struct {
	fd int // -1: closed (a record the lease is rewriting whole)
	id statefs.FileID
}

// keepFile opens name in kd with flags to keep it.
func keepFile(kd dir, name string, flags int) (keptFile, error) {
	fd, err := kd.OpenFile(name, flags)
	if err != nil {
		return keptFile{fd: -1}, err
	}
	id, err := statefs.IDOf(fd, kd.Join(name))
	if err != nil {
		unix.Close(fd)
		return keptFile{fd: -1}, err
	}
	return keptFile{fd: fd, id: id}, nil
}

// keepGuard keeps g, the guard of kd held locked, for the lease's writes
// (the acquirer then unlocks it rather than closing it: letGo). If the
// name is not g's file any more, it was replaced while we took the lease:
// an error, before anything was written.
func keepGuard(kd dir, g int) (keptFile, error) {
	held, err := statefs.IDOf(g, kd.Join(guardFile))
	if err != nil {
		return keptFile{fd: -1}, err
	}
	named, _, err := kd.Named(guardFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return keptFile{fd: -1}, err
	}
	if err != nil || named != held {
		return keptFile{fd: -1}, fmt.Errorf("%w: the guard lock file %s was replaced while the lease was being taken", store.ErrUnsafe, kd.Join(guardFile))
	}
	return keptFile{fd: g, id: held}, nil
}

func (f *keptFile) close() {
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
}

var _ store.Lease = (*Lease)(nil)

func (l *Lease) Key() string   { return l.key }
func (l *Lease) Fence() uint64 { return l.fence }
func (l *Lease) Slot() int {
	if l.kind == store.KindShared {
		return -1 // its slot is the store's business (holders.go)
	}
	return l.slot
}
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
// A lease revoked meanwhile cannot write its record, but its release
// still can (a revoked holder acknowledges its revocation): it forgets
// them then. Else a holder revoked each time before it could say so
// would pass on a longer list each time, which each next holder takes
// longer to stop, and under steady revocations none would ever start its
// command (seen in the chaos test).
func (l *Lease) LeftoversStopped(ctx context.Context) error {
	l.mu.Lock()
	l.leftoversGone = true
	l.mu.Unlock()
	// Every tree is this host's (Store.mark), whatever host it names.
	return l.update(ctx, func(r *record) { r.Leftovers = nil })
}

// SetCommand records the command's group and session (see store.Lease).
// With a cgroup, which finds the tree exactly, they are kept for the next
// write, and written within commandPIDDelay if nothing else did: an
// uncontended run of a short command stays at one record write (P1), and
// status shows the command's pid of a long one within a second. Where the
// renewals come at least every second (a TTL of up to 3 s) the first one
// carries them as soon: no write and no timer of their own, whose wake-up
// was most of what the cgroup cost a hold (P4). Without a cgroup they are
// written at once: a holder killed before then must not leave its process
// group unrecorded.
func (l *Lease) SetCommand(ctx context.Context, group, session store.ProcessID) error {
	l.mu.Lock()
	l.cmd = &holderRecord{CommandPID: group.ID, Group: group, Session: session}
	deferred := l.cgroup
	if deferred && l.cmdTimer == nil && !l.released && l.ttl/3 > time.Second {
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
	return l.update(ctx, func(r *record) { r.Holder.LastTick = t.UTC() })
}

// update is the compare-and-swap every holder write goes through: under
// the guard, the record must still carry this lease's token and the
// version it last wrote. It works on the guard and record kept open for
// the hold (lockKeptGuard, readKept): one flock, one pread, one pwrite and
// their checks, no open or close (P4).
func (l *Lease) update(ctx context.Context, change func(*record)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: the lease on %q (fence %d) was released", store.ErrLost, l.key, l.fence)
	}
	unlock, err := l.lockKeptGuard(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	// Only now, with the guard held: the names are checked under it.
	if err := l.stillThere(); err != nil {
		return err // moved, replaced or deleted: never write a record nobody reads
	}
	rec, cur, err := l.readKept()
	if err := l.owns(rec, err); err != nil {
		return err
	}
	change(&rec)
	if c := l.cmd; c != nil {
		rec.Holder.CommandPID, rec.Holder.Group, rec.Holder.Session = c.CommandPID, c.Group, c.Session
		l.cmdWritten = true
	}
	rec.Version++
	data := rec.marshal()
	inPlace := cur.InPlace(data)
	err = l.sd.WriteSlottedFD(l.record.fd, leaseFile, cur, data, false)
	if !inPlace {
		// Made whole under a new inode (WriteAtomic), or left as it was
		// if that failed: which file the name is now is the lease's own.
		l.record.close()
		id, _, nerr := l.sd.Named(leaseFile)
		if nerr != nil {
			return errors.Join(err, nerr)
		}
		l.record.id = id
	}
	if err != nil {
		// A write cut short may still have landed whole, where the bytes
		// it missed were there already: then it is this lease's record.
		if now, _, rerr := readRecord(l.sd); rerr != nil || now.Token != l.token || now.Version != rec.Version {
			return err
		}
	}
	l.version = rec.Version
	return nil
}

// lockKeptGuard takes the key's guard exclusively on the descriptor l keeps
// for it and returns what unlocks it. The
// guard must be the file the lease was taken under (l.guard.id); that it
// still is the one named guard, which every other writer of the record
// locks, the caller checks once it holds the lock (stillThere): a kept
// descriptor of a guard since replaced or unlinked would exclude nobody.
// While someone else holds the guard (an acquirer, a reader, release
// --force, for microseconds) it waits on a descriptor of its own, which
// the wait leaves behind if ctx ends first, and says whom it waits for
// after a second (Store.lockGuard).
func (l *Lease) lockKeptGuard(ctx context.Context) (func(), error) {
	switch err := unix.Flock(l.guard.fd, unix.LOCK_EX|unix.LOCK_NB); err {
	case nil:
		if l.unlockKept == nil { // made once, not at each renewal
			l.unlockKept = func() { unix.Flock(l.guard.fd, unix.LOCK_UN) }
		}
		return l.unlockKept, nil
	case unix.EWOULDBLOCK:
	default:
		return nil, fmt.Errorf("filestore: lock %s: %w", l.kd.Join(guardFile), err)
	}
	g, err := l.s.lockGuard(ctx, l.kd, false, unix.LOCK_EX, "the holder's write", nil)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, l.guardGone(err)
		}
		return nil, err
	}
	if id, err := statefs.IDOf(g, l.kd.Join(guardFile)); err != nil || id != l.guard.id {
		unix.Close(g)
		return nil, l.guardGone(err)
	}
	return func() { unix.Close(g) }, nil
}

// guardGone is the error of a lease whose guard is no longer the file it
// was taken under (or cannot be looked at: err).
func (l *Lease) guardGone(err error) error {
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w: the guard lock file %s of %q (fence %d) was moved, replaced or deleted", store.ErrLost, l.kd.Join(guardFile), l.key, l.fence)
}

// readKept reads the record through its descriptor kept open for the
// hold (under the guard).
func (l *Lease) readKept() (record, statefs.Slotted, error) {
	if l.record.fd < 0 {
		// Rewritten whole by this lease's last write: the file it wrote.
		f, err := keepFile(l.sd, leaseFile, unix.O_RDWR)
		if err != nil {
			return record{}, statefs.Slotted{}, err
		}
		if f.id != l.record.id {
			f.close()
			return record{}, statefs.Slotted{}, l.recordGone(nil)
		}
		l.record = f
	}
	return readRecordFD(l.sd, l.record.fd)
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
	rec, _, err := readRecord(l.sd)
	if err := l.owns(rec, err); err != nil {
		return store.RequestNone, err
	}
	data, err := l.sd.ReadFile(cancelFile)
	if errors.Is(err, fs.ErrNotExist) {
		return store.RequestNone, nil
	}
	if err != nil {
		l.s.log.Warn("ignoring a cancel request that cannot be read", "key", l.key, "error", err)
		return store.RequestNone, nil
	}
	fence, ok := parseCancel(data)
	if !ok {
		l.s.log.Warn("ignoring a cancel request that is not a fence", "path", l.sd.Join(cancelFile))
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
func (l *Lease) Release(ctx context.Context) error { return l.release(ctx, "") }

// Ended keeps how the holding ended for the release to write (history.go).
func (l *Lease) Ended(e store.Ending) {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	l.ending = &e
}

// ended is how the holding ended, as Ended said, else released.
func (l *Lease) ended() store.Ending {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	if l.ending == nil {
		return store.Ending{How: store.EndReleased}
	}
	return *l.ending
}

// release is Release, and with id not empty ReleaseDone: the mark goes
// first, under the same guard (once.go).
func (l *Lease) release(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	l.released = true
	<-l.left // our queue entry is gone before the lease is
	if l.cmdTimer != nil {
		l.cmdTimer.Stop()
	}
	close(l.unwatch)
	defer func() {
		l.notify.Close()
		l.guard.close()
		l.record.close()
		closeSlots([]slotDir{{i: l.slot, d: l.sd}})
		l.kd.Close()
	}()
	unlock, err := l.lockToRelease(ctx)
	if err != nil {
		// Dropping live alone leaves our record to look like a dead
		// holder's: the next Acquire takes it over.
		l.held.Release()
		unix.Close(l.live)
		return err
	}
	rec, cur, fd, err := l.readToRelease()
	var werr, lost error
	if id != "" {
		lost = l.markDone(id, rec, err)
	}
	switch {
	case err != nil:
		l.s.log.Warn("releasing a lease whose record cannot be read", "key", l.key, "error", err)
	case rec.Token == l.token, rec.Revoked && rec.Holder != nil && rec.Fence == l.fence:
		// Leftovers not confirmed stopped stay for the next holder.
		free := record{Fence: rec.Fence, Version: rec.Version + 1, Leftovers: rec.Leftovers}
		if l.leftoversGone {
			free.Leftovers = nil // confirmed, after a revocation (LeftoversStopped)
		}
		werr = l.sd.WriteSlottedFD(fd, leaseFile, cur, free.marshal(), false)
		if rec.Token == l.token { // a revoked holding's end is the revoker's (history.go)
			if herr := historyEnded(l.kd, rec.Holder, l.fence, l.s.now(), l.ended()); herr != nil {
				l.s.log.Warn("could not write the holding to the key's history", "key", l.key, "error", herr)
			}
		}
		if err := unix.Unlinkat(l.sd.FD, cancelFile, 0); err != nil && err != unix.ENOENT {
			l.s.log.Warn("cannot remove the cancel request", "path", l.sd.Join(cancelFile), "error", err)
		}
	}
	l.held.Release() // before live: the next holder must not wait on it
	unix.Close(l.live)
	unlock()
	l.s.log.Debug("released", "key", l.key, "fence", l.fence)
	return errors.Join(lost, werr)
}

// lockToRelease takes the key's guard exclusively for the release: on the
// descriptor the lease keeps for it while the name guard is still that
// file, else by the name, whatever file it is now, as anyone else would
// lock it. It returns what unlocks it.
func (l *Lease) lockToRelease(ctx context.Context) (func(), error) {
	if unlock, err := l.lockKeptGuard(ctx); err == nil {
		if id, _, err := l.kd.Named(guardFile); err == nil && id == l.guard.id {
			return unlock, nil
		}
		unlock()
	}
	g, err := l.s.lockGuard(ctx, l.kd, true, unix.LOCK_EX, "the holder's release", nil)
	if err != nil {
		return nil, err
	}
	return func() { unix.Close(g) }, nil
}

// readToRelease reads the record for the release, under the guard: through
// the descriptor the lease keeps while the name lease is still that file,
// else (rewritten whole by a revocation) by the name. fd is where the
// release writes it: the kept descriptor, or -1, by the name.
func (l *Lease) readToRelease() (record, statefs.Slotted, int, error) {
	if l.record.fd >= 0 {
		if id, _, err := l.sd.Named(leaseFile); err == nil && id == l.record.id {
			rec, cur, err := l.readKept()
			return rec, cur, l.record.fd, err
		}
	}
	rec, cur, err := readRecord(l.sd)
	return rec, cur, -1, err
}
