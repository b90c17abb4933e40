package filestore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/notify"
	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// Acquire takes the lease on key (see store.Store). The new fence is
// durably reserved before Acquire returns (internal/statefs). A record whose holder is dead
// (its live lock is free) is taken over at once, and the dead holder is the
// new Lease's Predecessor; a record whose holder is alive is never taken,
// even past its expiry.
func (s *Store) Acquire(ctx context.Context, key string, claim store.Claim) (store.Lease, *store.Holder, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	for what, text := range map[string]string{"name": claim.Name, "reason": claim.Reason} {
		if err := store.ValidateText(what, text); err != nil {
			return nil, nil, fmt.Errorf("filestore: %w", err)
		}
	}
	if claim.TTL <= 0 {
		return nil, nil, fmt.Errorf("filestore: ttl %v is not positive", claim.TTL)
	}
	if err := store.ValidateClaimKind(claim); err != nil {
		return nil, nil, fmt.Errorf("filestore: %w", err)
	}
	if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("filestore: acquire %q: %w", key, context.Cause(ctx))
	}
	// Without --wait, a guard that stays busy (its holder stopped or
	// wedged while it changed the key) is in the way as a holder is: the
	// key is busy, as flock -n finds a lock it cannot take at once.
	lctx, giveUp := ctx, context.CancelCauseFunc(nil)
	if !claim.Wait {
		lctx, giveUp = context.WithCancelCause(ctx)
		defer giveUp(nil)
	}
	kd, g, err := s.lockKey(lctx, key, true, unix.LOCK_EX, "acquire", giveUp)
	if holder := stuckGuard(ctx, err); holder != "" {
		return nil, &store.Holder{Name: "whatever holds the key's guard lock, " + holder}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if claim.Clock == nil {
		claim.Clock = boottime.Now
	}
	a := &acquirer{s: s, key: key, kd: kd, claim: claim}
	a.kind, a.slots = store.KindOf(claim)
	l, holder, err := a.acquire(ctx, g)
	if l == nil {
		kd.Close()
		return nil, holder, err
	}
	return l, nil, nil
}

// acquirer is one call of Acquire.
type acquirer struct {
	s     *Store
	key   string
	kd    dir
	claim store.Claim
	kind  store.Kind // of the claim, and its slots (holders.go)
	slots int
	entry *ownEntry // our queue entry while we wait
	last  uint64    // the highest sequence number seen in the queue
	// ahead are the sequence numbers, ascending, of the entries that may
	// still be live ahead of ours: those listed when we queued, less those
	// found gone or dead since. Nobody queues ahead of a queued waiter, so
	// a wake-up reads only from the end of this list, never the queue.
	ahead []uint64
	// saidMoved: a holder whose files were moved away was waited for
	// (its claim), which the log said once and the fence stays above.
	saidMoved bool
	// recheck: the last wait for any of several slots woke by an event
	// (holders.go, waitAny).
	recheck bool
	// saidNoInotify: that wait had no inotify to wait with, and polls;
	// logged once.
	saidNoInotify bool
}

// busy says who is in the way: whom to report, and the lock to wait on:
// the queue entry ahead (wait, name), else the live of any of the slots
// lives (holders.go).
type busy struct {
	holder *store.Holder
	wait   dir
	name   string
	lives  []int
	moved  bool // a holder whose files were moved away: poll for its claim
}

// acquire takes the lease, or waits in the queue for it; g is the guard,
// locked, which it closes.
func (a *acquirer) acquire(ctx context.Context, g int) (*Lease, *store.Holder, error) {
	l, b, err := a.attempt(g)
	if l != nil || err != nil || !a.claim.Wait {
		letGo(g, l)
		return l, b.holder, err
	}
	err = a.enqueue()
	unix.Close(g)
	if err != nil {
		return nil, nil, err
	}
	if n := len(a.ahead); n > 0 {
		b.wait, b.name, b.lives = a.entry.qd, formatSeq(a.ahead[n-1]), nil
	}
	a.s.log.Debug("waiting for the lease", "key", a.key, "entry", a.entry.name)
	for {
		l, b, err = a.waitTurn(ctx, b)
		if l != nil {
			return l, nil, nil
		}
		if err != nil {
			a.leave()
			return nil, nil, err
		}
	}
}

// waitTurn sleeps in the kernel until the lock in our way (b) is
// released, and then tries again under the guard: the holders' live
// locks when we are at the head of the queue, else the entry lock of the
// waiter just ahead. A release, a death and a departure all drop that
// lock, and wake us (and nobody else) at once.
func (a *acquirer) waitTurn(ctx context.Context, b busy) (*Lease, busy, error) {
	var err error
	if b.moved {
		// No lock of it is left to sleep on: its claim (an abstract
		// name) is free when it is gone.
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	} else if b.name != "" {
		err = waitUnlocked(ctx, b.wait, b.name)
	} else {
		err = a.waitLives(ctx, b.lives)
	}
	if ctx.Err() != nil {
		return nil, b, fmt.Errorf("filestore: waiting for %q: %w", a.key, context.Cause(ctx))
	}
	if err != nil {
		return nil, b, err
	}
	g, err := a.s.lockGuard(ctx, a.kd, true, unix.LOCK_EX, "acquire", nil)
	if err != nil {
		return nil, b, err
	}
	l, b, err := a.attempt(g)
	letGo(g, l)
	return l, b, err
}

// letGo lets the guard g go after an attempt: the lease l, if it took
// one, keeps g for its writes (keepGuard), unlocked; else it is closed.
func letGo(g int, l *Lease) {
	if l != nil && l.guard.fd == g {
		unix.Flock(g, unix.LOCK_UN)
		return
	}
	unix.Close(g)
}

// waitUnlocked returns once nobody holds flock(LOCK_EX) on name in d (or
// it is gone), or ctx ends. It takes LOCK_SH, which probes (LOCK_SH|NB)
// never conflict with, and drops it at once.
func waitUnlocked(ctx context.Context, d dir, name string) error {
	fd, err := d.LockFile(ctx, name, false, unix.LOCK_SH)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// attempt takes the lease if it is our turn and a slot our claim may take
// is free. The caller holds the guard exclusively. It reads the slots'
// records, our own entry and the entries just ahead of ours (dead ones
// are removed on the way), never the rest of the queue.
func (a *acquirer) attempt(g int) (*Lease, busy, error) {
	ks, err := a.readSlots(g)
	if err != nil {
		return nil, busy{}, err
	}
	l, b, err := a.attemptOn(g, ks)
	ks.close() // all but what the lease keeps
	return l, b, err
}

// attemptOn is attempt with the slots read, their records open for the
// take.
func (a *acquirer) attemptOn(g int, ks keySlots) (*Lease, busy, error) {
	if err := a.stillQueued(); err != nil {
		return nil, busy{}, err
	}
	served := ks.served()
	if a.entry == nil {
		if err := a.listQueue(served); err != nil {
			return nil, busy{}, err
		}
	}
	next, err := a.next(served)
	if err != nil {
		return nil, busy{}, err
	}
	if a.entry == nil {
		// Once queued, everyone ahead and every holder since was of our
		// kind: they were checked against us, or we against them.
		if err := ks.sameKind(a.kind, a.slots, next); err != nil {
			return nil, busy{}, fmt.Errorf("filestore: %q: %w", a.key, err)
		}
	}
	take, wait, in := ks.pick(a.kind, a.slots)
	if take >= 0 && next == nil {
		return a.takeIfNotMoved(ks, take, g)
	}
	b := busy{holder: in, lives: wait}
	if take >= 0 {
		h := next.w.holder()
		b.holder = &h
	}
	if next != nil && a.entry != nil {
		b.wait, b.name, b.lives = a.entry.qd, next.name, nil
	}
	return nil, b, nil
}

// takeIfNotMoved takes slot i (see take) unless a holder of it whose key
// directory was moved away still runs: then it is in the way.
func (a *acquirer) takeIfNotMoved(ks keySlots, i, g int) (*Lease, busy, error) {
	c, moved, err := a.s.claim(a.key, i)
	if err != nil {
		return nil, busy{}, err
	}
	if !moved {
		l, err := a.take(ks, i, c, g)
		return l, busy{}, err
	}
	if !a.saidMoved {
		a.saidMoved = true
		a.s.log.Warn("a holder of this key whose key directory was moved or deleted still runs; waiting for it", "key", a.key)
	}
	return nil, busy{moved: true, holder: &store.Holder{Name: "a holder whose key directory was moved or deleted (its command is being stopped)"}}, nil
}

// lockLive opens live in the slot directory sd and tries its lock: free
// is whether we got it.
func (a *acquirer) lockLive(sd dir, g int, ks keySlots) (live int, free bool, err error) {
	live, err = sd.OpenFile(liveFile, unix.O_RDONLY|unix.O_CREAT)
	if err != nil {
		return -1, false, err
	}
	switch err := lockUnlessHeld(live); err {
	case nil:
		return live, true, nil
	case unix.EWOULDBLOCK:
		if what := a.lockedHere(sd, live, g, ks); what != "" {
			unix.Close(live)
			return -1, false, fmt.Errorf("%w: %s is %s under a second name (a hard link): its lock is one this process holds as it looks, so nobody could ever take the key", store.ErrCorrupt, sd.Join(liveFile), what)
		}
		return live, false, nil
	default:
		unix.Close(live)
		return -1, false, fmt.Errorf("filestore: lock %s: %w", sd.Join(liveFile), err)
	}
}

// lockUnlessHeld takes flock(LOCK_EX) on a live, open as fd, unless a
// holder holds it: EWOULDBLOCK. Holders lock live only under the guard,
// which the caller holds, so a LOCK_SH found on it is not a holder's but
// a waiter's or a reader's probe (statefs.ProbeFD, an abandoned wait on
// one slot), which drops it at once. Such a lock is waited out (up to a
// second, then it counts as held): else a freed slot would look held, a
// higher one be taken (M1) or a claim without --wait be told the key is
// busy.
func lockUnlessHeld(fd int) error {
	for try := 0; ; try++ {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EWOULDBLOCK || try == 1000 {
			return err
		}
		switch err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err {
		case nil:
			unix.Flock(fd, unix.LOCK_UN) // only LOCK_SH: a waiter's
		case unix.EWOULDBLOCK:
			return err // a holder's LOCK_EX
		default:
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// stillQueued checks that our entry, if we queued, is still there.
func (a *acquirer) stillQueued() error {
	e := a.entry
	if e == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(e.qd.FD, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Ino != e.ino {
		return fmt.Errorf("filestore: queue entry %s was removed by someone else while waiting", e.qd.Join(e.name))
	}
	return nil
}

// listQueue lists the queue's names, before we queue: the highest
// sequence number (ours will be above it), and the entries ahead. Only
// names are read here, no entry.
func (a *acquirer) listQueue(served uint64) error {
	// Never the name of a holder's own entry, which status leaves out
	// while it is being removed (take).
	a.last = max(a.last, served)
	qd, err := a.kd.OpenDir(queueDir, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer qd.Close()
	names, err := qd.List()
	if err != nil {
		return err
	}
	a.ahead = a.ahead[:0]
	for _, name := range names {
		if strings.HasPrefix(name, statefs.TempPrefix) {
			continue
		}
		seq, ok := parseSeq(name)
		if !ok {
			return fmt.Errorf("%w: %s is not a queue entry", store.ErrCorrupt, qd.Join(name))
		}
		a.ahead = append(a.ahead, seq)
		a.last = max(a.last, seq)
	}
	slices.Sort(a.ahead)
	return nil
}

// next is the live entry nearest ahead of ours (of the queue's end, before
// we queue), nil if none: then we are next. It reads entries from the end
// of a.ahead, dropping those gone, dead (removed: the caller holds the
// guard exclusively) or already served: every entry up to a holder's own
// took its turn or left before that holder took its (keySlots.served).
func (a *acquirer) next(served uint64) (*queued, error) {
	if len(a.ahead) == 0 {
		return nil, nil // nothing to read: the queue is not opened
	}
	qd, err := a.kd.OpenDir(queueDir, false)
	if errors.Is(err, os.ErrNotExist) {
		a.ahead = nil
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer qd.Close()
	for len(a.ahead) > 0 {
		seq := a.ahead[len(a.ahead)-1]
		if seq <= served {
			a.ahead = nil
			break
		}
		name := formatSeq(seq)
		e, alive, err := readEntry(qd, name)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if err == nil && alive {
			e.seq = seq
			return &e, nil
		}
		if err == nil && unix.Unlinkat(qd.FD, name, 0) == nil {
			a.s.log.Debug("removed a dead waiter's queue entry", "path", qd.Join(name), "pid", e.w.PID)
		}
		a.ahead = a.ahead[:len(a.ahead)-1]
	}
	return nil, nil
}

// lockedHere names what live in sd, open as fd and found locked, is a
// second name of among the files this acquirer holds locked itself: the
// guard g (which every acquirer holds as it looks), the live of a slot
// read before (ks) or its own queue entry. Only a hard link made by hand
// (ln -f guard live) does that, and then live looks held for good to
// everyone. It is asked only once live was found locked, so a free key's
// take pays nothing.
func (a *acquirer) lockedHere(sd dir, live, g int, ks keySlots) string {
	id, err := statefs.IDOf(live, sd.Join(liveFile))
	if err != nil {
		return ""
	}
	if gid, err := statefs.IDOf(g, a.kd.Join(guardFile)); err == nil && gid == id {
		return "the key's guard " + a.kd.Join(guardFile) + " (release --force clears it)"
	}
	for _, st := range ks {
		if lid, err := statefs.IDOf(st.live, st.d.Join(liveFile)); err == nil && st.free && lid == id {
			return "the lock file " + st.d.Join(liveFile) + " (release --force clears it)"
		}
	}
	if e := a.entry; e != nil {
		if eid, err := statefs.IDOf(e.fd, e.qd.Join(e.name)); err == nil && eid == id {
			return "this waiter's queue entry " + e.qd.Join(e.name) + " (unlocked once this waiter has gone)"
		}
	}
	return ""
}

// taking is what a take holds before its record is written: released
// all together (undo) when a step fails. The slot's live and record are
// its slotState's until the Lease keeps them.
type taking struct {
	st     *slotState       // the slot taken, live locked
	claim  *unixsock.Claim  // our claim on the slot (moved_linux.go)
	guard  keptFile         // for the renewals, until the release: the caller's g
	notify *notify.Listener // listening before the record names it
	token  string
	term   store.Term // from before the record's expiry is stamped
}

// undo lets go of what t holds but the guard, which stays the caller's,
// and the slot's files, which stay its slotState's.
func (t *taking) undo() {
	if t.notify != nil {
		t.notify.Close()
	}
	t.claim.Release()
}

// take writes the record that makes us the holder of slot i of ks, whose
// directory it makes if it has none, and returns the Lease, which keeps
// the slot's directory, live and record, and g, the guard the caller
// holds, for its writes: the caller then only unlocks g (letGo). c is our
// claim on the slot.
func (a *acquirer) take(ks keySlots, i int, c *unixsock.Claim, g int) (*Lease, error) {
	st := ks.slot(i)
	if st == nil {
		var err error
		if st, err = a.newSlot(i, g); err != nil {
			c.Release()
			return nil, err
		}
		defer st.close()
	}
	t := &taking{st: st, claim: c}
	var next record
	var kept keptFile
	var err error
	t.guard, err = keepGuard(a.kd, g)
	if err == nil {
		next, err = a.prepare(t, ks)
	}
	if err == nil {
		kept, err = a.write(st, next)
	}
	if err != nil {
		t.undo()
		return nil, err
	}
	st.taken = true
	left := a.leaveInBackground()
	dead := a.clearAfter(st)
	for _, o := range ks {
		if a.inherits(st, o) {
			if d := a.clearAfter(o); dead == nil {
				dead = d
			}
		}
	}
	if dead == nil {
		dead = &store.Holder{Fence: st.rec.Fence} // pruned, or none
	}
	// Those another holder stops are theirs to record, ours to wait for.
	beside := ks.stopping(st)
	pred := store.PredecessorOf(dead, a.s.mark(store.PassOn(next.Leftovers, beside...)))
	if len(next.Leftovers) > 0 {
		a.s.log.Info("took over the lease of a dead holder", "key", a.key, "dead_pid", pred.PID, "dead_fence", pred.Fence, "fence", next.Fence)
	}
	if len(beside) > 0 {
		a.s.log.Info("another holder of the key is stopping dead holders' leftovers; they are stopped before this command starts", "key", a.key, "trees", len(beside))
	}
	l := a.lease(t, pred, next, kept, left)
	a.s.log.Debug("acquired", "key", a.key, "fence", next.Fence, "slot", l.Slot())
	return l, nil
}

// inherits says whether a take of slot st also takes over what the
// holders before it left in the free slot o: an exclusive take every
// slot's (it runs alone: nothing a dead holder of another slot left may
// still run); a shared take every slot's too (it never runs beside a
// dead slot or exclusive holder's tree, and its slot number is no
// promise to wait for); a take of --slots N those of the slots N and up,
// which no holder beside it can take again (left by a bigger N, or by
// shared holders, before the key was free): else their trees would run
// beside its N holders for good. A free record has nothing to pass on.
func (a *acquirer) inherits(st, o *slotState) bool {
	if o == st || !o.free || o.rec.free() && a.kind != store.KindExclusive {
		return false
	}
	return a.kind != store.KindSlot || o.i >= a.slots
}

// newSlot makes slot i's directory and reads it, as readSlot does: free,
// its live locked by us.
func (a *acquirer) newSlot(i, g int) (*slotState, error) {
	sd, err := openSlot(a.kd, i, true)
	if err != nil {
		return nil, err
	}
	st, err := a.readSlot(slotDir{i: i, d: sd}, g, nil)
	if err == nil && !st.free {
		st.close()
		err = fmt.Errorf("filestore: %s is locked, yet its slot was not listed", sd.Join(liveFile))
	}
	return st, err
}

// write writes next as the record of the slot st, over what st read,
// through st.rf, and returns the record file the lease keeps.
func (a *acquirer) write(st *slotState, next record) (keptFile, error) {
	// The fence is durable in its reservation; the record need not be
	// (internal/statefs): one write in place, through rf.
	data := next.marshal()
	if err := st.d.WriteSlottedFD(st.rf.fd, leaseFile, st.cur, data, false); err != nil {
		return keptFile{fd: -1}, err
	}
	if st.cur.InPlace(data) {
		return st.rf, nil
	}
	// Made whole, a new file: open for the renewals too, under the
	// guard, the file we wrote.
	kept, err := keepFile(st.d, leaseFile, unix.O_RDWR)
	if err == nil {
		st.rf.close()
	}
	return kept, err
}

// prepare gets what the record will name, in t, and returns the record:
// a token, the socket listened on before the write (so that no
// revocation or cancel after the write can miss us), and the next fence,
// above every slot's. An exclusive holder's record carries the trees of
// every dead holder of the key; any other the trees of its slot's.
func (a *acquirer) prepare(t *taking, ks keySlots) (record, error) {
	st := t.st
	var err error
	if t.token, err = newToken(); err != nil {
		return record{}, err
	}
	if t.notify, err = listenNotify(st.d, a.kd.FileMode()); err != nil {
		return record{}, err
	}
	top := max(ks.maxFence(), st.rec.Fence)
	atLeast := top + 1
	if a.saidMoved { // a live holder whose files are gone: S4 across them
		atLeast = max(atLeast, a.s.fences().RestartFloor(time.Now()))
	}
	fence, err := a.s.nextFence(atLeast)
	if top >= statefs.FenceMax-statefs.FenceBlock && errors.Is(err, statefs.ErrUsedUp) {
		// The record's fence used the fences up, whatever the
		// reservation the error names holds: say which file release
		// --force repairs.
		err = fmt.Errorf("%w: %s: fence %d is too near the limit: %w", store.ErrCorrupt, st.d.Join(leaseFile), top, statefs.ErrUsedUp)
	}
	if err != nil {
		return record{}, err
	}
	// Every tree that may still run: what earlier holders left
	// unconfirmed, and the dead holder's (or the pruned one's) own.
	trees := st.rec.trees()
	for _, o := range ks {
		if a.inherits(st, o) {
			trees = store.PassOn(trees, o.rec.trees()...)
		}
	}
	t.term = store.Term{Start: a.claim.Clock(), TTL: a.claim.TTL}
	now := a.s.now()
	next := record{Leftovers: trees, Fence: fence, Version: st.rec.Version + 1, Token: t.token}
	next.Holder = &holderRecord{
		Kind: a.kind, Name: a.claim.Name, PID: os.Getpid(), Host: a.s.host, Reason: a.claim.Reason,
		Marker: a.claim.Marker, Cgroup: a.claim.Cgroup, Notify: t.notify.Name(),
		Acquired: now, Expires: now.Add(a.claim.TTL),
	}
	if a.kind == store.KindSlot {
		next.Holder.Slots, next.Holder.Slot = a.slots, st.i
	}
	if a.entry != nil {
		next.Holder.Entry = a.entry.name
	}
	return next, nil
}

// leaveInBackground removes our queue entry in the background: removing a
// file waits for the file system's journal, which took milliseconds of a
// handoff on a busy disk here, and nobody needs it gone at once (the
// waiter behind us reads it as served: next). The channel is closed once
// it is gone; Release waits for it (S8).
func (a *acquirer) leaveInBackground() chan struct{} {
	left := make(chan struct{})
	e, remove := a.entry, removeOwnEntry
	if e == nil {
		close(left)
		return left
	}
	a.entry = nil
	go func() {
		defer close(left)
		remove(e)
	}()
	return left
}

// clearAfter removes what the holder before us left in slot st that is
// ours to remove now: a dead holder's socket, an old cancel request; a
// dead holder's holding ends in the history, how unknown; and it returns
// that dead holder (or a pruned one), whose trees are in our record. A
// slot not ours (an exclusive take's others) gets a free record too.
func (a *acquirer) clearAfter(st *slotState) *store.Holder {
	rec := st.rec
	if rec.Holder != nil && isNotifyName(rec.Holder.Notify) {
		unixsock.Remove(st.d.FD, rec.Holder.Notify) // the dead holder's socket
	}
	if err := unix.Unlinkat(st.d.FD, cancelFile, 0); err != nil && err != unix.ENOENT {
		a.s.log.Warn("cannot remove an old cancel request", "path", st.d.Join(cancelFile), "error", err)
	}
	if rec.Holder != nil && !rec.Revoked {
		// A holder that died holding: its holding ends here, how unknown
		// (history.go); a revoked one's end is the revoker's.
		if err := historyEnded(a.kd, rec.Holder, rec.Fence, time.Time{}, store.Ending{How: store.EndUnknown}); err != nil {
			a.s.log.Warn("could not write the dead holder's holding to the key's history", "key", a.key, "error", err)
		}
	}
	if !st.taken && !rec.free() {
		free := record{Fence: rec.Fence, Version: rec.Version + 1}
		if err := st.d.WriteSlottedFD(st.rf.fd, leaseFile, st.cur, free.marshal(), false); err != nil {
			a.s.log.Warn("could not clear a dead holder's record; its trees stay listed twice", "path", st.d.Join(leaseFile), "error", err)
		}
	}
	pred := rec.Predecessor
	if rec.Holder != nil {
		pred = rec.Holder // live was free: its holder died holding the lease
	}
	if pred == nil {
		return nil
	}
	return pred.holder(rec.Fence)
}

// lease is the Lease of a take that wrote next after pred,
// and starts its watchers.
func (a *acquirer) lease(t *taking, pred *store.Holder, next record, kept keptFile, left chan struct{}) *Lease {
	l := &Lease{
		s: a.s, key: a.key, kd: a.kd, sd: t.st.d, slot: t.st.i, kind: a.kind,
		live: t.st.live, fence: next.Fence, token: t.token,
		ttl: a.claim.TTL, clock: a.claim.Clock, term: t.term,
		version: next.Version, cgroup: a.claim.Cgroup != "", pred: pred,
		changes: make(chan struct{}, 1), left: left, guard: t.guard, record: kept,
		notify: t.notify, held: t.claim, unwatch: make(chan struct{}),
	}
	t.notify.Notify(l.changes, func(err error) {
		a.s.log.Error("listening for lease changes stopped; they will be seen at the next renewal", "error", err)
	})
	go l.watchPath(l.unwatch)
	return l
}

func newToken() (string, error) {
	var b [tokenLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("filestore: make a lease token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// enqueue appends our entry to the queue, locked before it becomes
// visible. The caller holds the guard exclusively.
func (a *acquirer) enqueue() error {
	qd, err := a.kd.OpenDir(queueDir, true)
	if err != nil {
		return err
	}
	entry := waiterRecord{Kind: a.kind, PID: os.Getpid(), Host: a.s.host, Name: a.claim.Name, Reason: a.claim.Reason, Since: a.s.now()}
	if a.kind == store.KindSlot {
		entry.Slots = a.slots
	}
	data := entry.marshal()
	for seq := a.last + 1; ; seq++ {
		name := formatSeq(seq)
		// Durable, though a waiter's entry is worth nothing after a crash:
		// it is written under a name that did not exist, which no file
		// system flushes on rename, and an empty entry left by a power cut
		// would read as corrupt. It is written long before any handoff.
		fd, err := qd.WriteAtomic(name, data, statefs.WriteOpts{Locked: true, NoReplace: true, Durable: true})
		if errors.Is(err, unix.EEXIST) && seq < a.last+100 {
			a.ahead = append(a.ahead, seq) // an entry we did not list, ahead of ours
			continue
		}
		if err != nil {
			qd.Close()
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			unix.Unlinkat(qd.FD, name, 0)
			qd.Close()
			return fmt.Errorf("filestore: stat %s: %w", qd.Join(name), err)
		}
		a.entry = &ownEntry{qd: qd, name: name, fd: fd, ino: st.Ino}
		return nil
	}
}

// leave removes our queue entry, if any.
func (a *acquirer) leave() {
	if a.entry != nil {
		a.entry.remove()
		a.entry = nil
	}
}

// ownEntry is the queue entry of a waiter in this process, locked by it.
type ownEntry struct {
	qd   dir
	name string
	fd   int
	ino  uint64
}

// removeOwnEntry is how take removes a new holder's entry in the
// background; a test holds it back.
var removeOwnEntry = (*ownEntry).remove

// remove unlinks the entry and then drops its lock, in that order, so that
// nobody sees it unlocked and takes it for a dead waiter's meanwhile.
func (e *ownEntry) remove() {
	var st unix.Stat_t
	if unix.Fstatat(e.qd.FD, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == e.ino {
		unix.Unlinkat(e.qd.FD, e.name, 0)
	}
	unix.Close(e.fd)
	e.qd.Close()
}

// queued is a live waiter's entry.
type queued struct {
	name string
	seq  uint64
	ino  uint64
	w    waiterRecord
}

const seqDigits = 20

func formatSeq(seq uint64) string { return fmt.Sprintf("%020d", seq) }

func parseSeq(name string) (uint64, bool) {
	if len(name) != seqDigits {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(name, 10, 64)
	return n, err == nil
}

// readQueue reads the live waiters of a key in arrival order. Entries
// whose lock is free belong to dead waiters: they are skipped, and with
// removeDead (only under the guard held exclusively) removed, each reported
// to removed. A garbage entry or a name that is not an entry is corrupt
// state; a symlink is unsafe.
func (s *Store) readQueue(kd dir, removeDead bool, removed func(path string)) ([]queued, error) {
	qd, err := kd.OpenDir(queueDir, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer qd.Close()
	names, err := qd.List()
	if err != nil {
		return nil, err
	}
	var q []queued
	for _, name := range names {
		if len(name) > len(statefs.TempPrefix) && name[:len(statefs.TempPrefix)] == statefs.TempPrefix {
			continue
		}
		seq, ok := parseSeq(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s is not a queue entry", store.ErrCorrupt, qd.Join(name))
		}
		e, alive, err := readEntry(qd, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // it left while we listed
		}
		if err != nil {
			return nil, err
		}
		if !alive {
			if removeDead {
				if err := unix.Unlinkat(qd.FD, name, 0); err == nil {
					s.log.Debug("removed a dead waiter's queue entry", "path", qd.Join(name), "pid", e.w.PID)
					if removed != nil {
						removed(qd.Join(name))
					}
				}
			}
			continue
		}
		e.seq = seq
		q = append(q, e)
	}
	sortQueue(q)
	return q, nil
}

func readEntry(qd dir, name string) (queued, bool, error) {
	path := qd.Join(name)
	fd, err := qd.OpenRaw(name, unix.O_RDONLY)
	if err != nil {
		return queued{}, false, err
	}
	defer unix.Close(fd)
	st, err := qd.CheckFile(fd, name)
	if err != nil {
		return queued{}, false, err
	}
	data, err := statefs.ReadFD(fd, path)
	if err != nil {
		return queued{}, false, err
	}
	w, err := parseWaiter(data, path)
	if err != nil {
		return queued{}, false, err
	}
	alive, err := statefs.ProbeFD(fd, path)
	if err != nil {
		return queued{}, false, err
	}
	return queued{name: name, ino: st.Ino, w: w}, alive, nil
}

func sortQueue(q []queued) {
	slices.SortFunc(q, func(a, b queued) int { return cmp.Compare(a.seq, b.seq) })
}
