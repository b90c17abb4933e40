package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// Many holders of one key (M1, M2). A key has slots, each a directory
// with the files one holder needs: its record (lease), its liveness lock
// (live), its cancel request and its notify socket. Slot 0 is the key
// directory itself, as it always was, so that an exclusive hold is what
// it was; slot i >= 1 is holders/<i> in it, made by the first holder of
// that slot. The guard, the queue, the done IDs and the history stay the
// key's, one of each.
//
// A slot holder (--slots N) takes the lowest free slot of 0..N-1 and
// reports it; a shared holder takes the lowest free slot of any number
// (reported as -1, the number is internal); an exclusive holder takes
// slot 0 once every slot is free. So an exclusive claim on a key that
// never had another kind pays one openat of holders (ENOENT), and a
// holder of any kind is the one lock of its slot's live: it renews,
// is fenced, revoked, cancelled and found dead alone, through the one
// Lease code that is parameterised by its slot's directory.
//
// Admission is the queue's (acquire.go), strictly in arrival order across
// kinds: only the head waiter (or a newcomer with nobody queued) may take
// a slot. A head that may take any of several busy slots (a slot or
// shared claim behind a full key) watches each one's live for the close
// that drops its lock, all in one inotify instance (waitAny); an
// exclusive head sleeps in flock on one busy slot at a time.

// holdersDir is the directory of a key's slots 1 and up.
const holdersDir = "holders"

// slotName is the name of slot i >= 1 in holders.
func slotName(i int) string { return strconv.Itoa(i) }

// parseSlotName is the slot a name in holders names: 1..MaxSlots-1, in
// the one form slotName makes.
func parseSlotName(name string) (int, bool) {
	i, err := strconv.Atoi(name)
	if err != nil || i < 1 || i >= store.MaxSlots || slotName(i) != name {
		return 0, false
	}
	return i, true
}

// slotDir is one open slot directory of a key; slot 0's is the key
// directory's own descriptor, which closeSlots leaves open.
type slotDir struct {
	i int
	d dir
}

// openSlots opens kd's slot directories: slot 0 (kd itself), then those
// in holders, ascending. A name in holders that is no slot is corrupt.
func openSlots(kd dir) ([]slotDir, error) {
	sds := []slotDir{{i: 0, d: kd}}
	hd, err := kd.OpenDir(holdersDir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return sds, nil
	}
	if err != nil {
		return nil, err
	}
	defer hd.Close()
	idx, err := slotIndexes(hd)
	if err != nil {
		return nil, err
	}
	for _, i := range idx {
		sd, err := hd.OpenDir(slotName(i), false)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed as we listed (a reader without the guard)
		}
		if err != nil {
			closeSlots(sds)
			return nil, err
		}
		sds = append(sds, slotDir{i: i, d: sd})
	}
	return sds, nil
}

// slotIndexes lists the slots in holders, ascending.
func slotIndexes(hd dir) ([]int, error) {
	names, err := hd.List()
	if err != nil {
		return nil, err
	}
	idx := make([]int, 0, len(names))
	for _, name := range names {
		if strings.HasPrefix(name, statefs.TempPrefix) {
			continue // a group store's slot directory being made
		}
		i, ok := parseSlotName(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s is not a holder's slot", store.ErrCorrupt, hd.Join(name))
		}
		idx = append(idx, i)
	}
	slices.Sort(idx)
	return idx, nil
}

func closeSlots(sds []slotDir) {
	for _, sd := range sds {
		if sd.i > 0 {
			sd.d.Close()
		}
	}
}

// openSlot opens slot i of kd (kd itself for 0), making it with create;
// close it with closeSlots.
func openSlot(kd dir, i int, create bool) (dir, error) {
	if i == 0 {
		return kd, nil
	}
	hd, err := kd.OpenDir(holdersDir, create)
	if err != nil {
		return dir{FD: -1}, err
	}
	defer hd.Close()
	return hd.OpenDir(slotName(i), create)
}

// slotState is one slot as an acquirer reads it under the key's guard
// held exclusively: its record, open to write, and its live, open and
// locked by us when free.
type slotState struct {
	slotDir
	rf    keptFile
	rec   record
	cur   statefs.Slotted
	live  int
	free  bool
	taken bool // the Lease keeps d, rf and live
}

// holder describes the slot's holder (one that holds live with no
// record: unrecordedHolder).
func (st *slotState) holder() *store.Holder {
	if h := st.rec.Holder.holder(st.rec.Fence); h != nil {
		return h
	}
	return &store.Holder{Kind: store.KindExclusive, Name: unrecordedHolder, Fence: st.rec.Fence}
}

// keySlots is every slot of a key that has a directory, by slot.
type keySlots []*slotState

// readSlots reads every slot of the key under the guard g, held
// exclusively: on a key that never had more than one holder, slot 0 and
// one openat of holders.
func (a *acquirer) readSlots(g int) (keySlots, error) {
	sds, err := openSlots(a.kd)
	if err != nil {
		return nil, err
	}
	ks := make(keySlots, 0, len(sds))
	for n, sd := range sds {
		st, err := a.readSlot(sd, g, ks)
		if err != nil {
			ks.close()
			closeSlots(sds[n:])
			return nil, err
		}
		ks = append(ks, st)
	}
	return ks, nil
}

// readSlot reads the slot sd: its record, and its live, which it locks
// if it can.
func (a *acquirer) readSlot(sd slotDir, g int, ks keySlots) (*slotState, error) {
	st := &slotState{slotDir: sd, live: -1}
	var err error
	st.rf, st.rec, st.cur, err = openRecord(sd.d)
	if err == nil {
		st.live, st.free, err = a.lockLive(sd.d, g, ks)
	}
	if err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}

func (st *slotState) close() {
	if st.taken {
		return
	}
	st.rf.close()
	if st.live >= 0 {
		unix.Close(st.live) // and with it the lock, if we got it
	}
	closeSlots([]slotDir{st.slotDir})
}

func (ks keySlots) close() {
	for _, st := range ks {
		st.close()
	}
}

// served is the newest queue entry a holder of the key waited in, dead or
// alive: every entry up to it took its turn or left before it (next).
func (ks keySlots) served() uint64 {
	var n uint64
	for _, st := range ks {
		if h := st.rec.Holder; h != nil {
			if seq, ok := parseSeq(h.Entry); ok {
				n = max(n, seq)
			}
		}
	}
	return n
}

// maxFence is the highest fence any slot's record carries.
func (ks keySlots) maxFence() uint64 {
	var n uint64
	for _, st := range ks {
		n = max(n, st.rec.Fence)
	}
	return n
}

// stopping is the dead holders' trees that live holders of slots other
// than st are stopping: those their records carry as not confirmed
// stopped. A holder that took a dead exclusive holder's slot stops its
// tree before its own command starts, and so must every other holder
// that takes a slot beside it meanwhile (a shared one, or one of another
// slot): it stops them too, as the next holder would if that one died.
// They stay in their holder's record only: it confirms them.
func (ks keySlots) stopping(st *slotState) []store.Leftover {
	var trees []store.Leftover
	for _, o := range ks {
		if o != st && !o.free {
			trees = store.PassOn(trees, o.rec.Leftovers...)
		}
	}
	return trees
}

// sameKind checks a claim of kind k and n slots against the key's live
// holders (those with a record) and the waiter nearest ahead (M1, M2).
func (ks keySlots) sameKind(k store.Kind, n int, next *queued) error {
	for _, st := range ks {
		if !st.free && st.rec.Holder != nil {
			if err := store.SameKind(k, n, *st.holder(), "holder"); err != nil {
				return err
			}
		}
	}
	if next != nil {
		return store.SameKind(k, n, next.w.holder(), "waiter")
	}
	return nil
}

// pick is the slot a claim of kind k and n slots takes now, or -1; then
// wait is the slots whose holders are in its way, any of whom leaving
// may let it in (for an exclusive claim, the lowest busy one: it waits
// for one at a time), and in one of their holders.
func (ks keySlots) pick(k store.Kind, n int) (take int, wait []int, in *store.Holder) {
	var busy []*slotState
	for _, st := range ks {
		if !st.free {
			busy = append(busy, st)
		}
	}
	if len(busy) == 0 {
		return 0, nil, nil
	}
	switch k {
	case store.KindExclusive:
		return -1, []int{busy[0].i}, busy[0].holder()
	case store.KindShared:
		if b := busy[0]; b.i == 0 && b.holder().Kind == store.KindExclusive {
			return -1, []int{0}, b.holder()
		}
		n = store.MaxSlots
	}
	free := 0 // the lowest slot no busy one has
	for _, st := range busy {
		if st.i == free {
			free++
		}
	}
	if free < n {
		return free, nil, nil
	}
	for _, st := range busy {
		wait = append(wait, st.i)
	}
	return -1, wait, busy[0].holder()
}

// slot is the state of slot i, or nil if it has no directory.
func (ks keySlots) slot(i int) *slotState {
	for _, st := range ks {
		if st.i == i {
			return st
		}
	}
	return nil
}

// waitLives returns once any of the slots' live may be unlocked (or is
// gone), or ctx ends. One slot is slept on in flock (waitLive); several
// through one inotify instance (waitAny).
func (a *acquirer) waitLives(ctx context.Context, slots []int) error {
	if len(slots) == 1 {
		return a.waitLive(ctx, slots[0])
	}
	return a.waitAny(ctx, slots)
}

// anyWait is a wait for any of several slots' live: their directories and
// lives, open, and the inotify instance that watches the lives.
type anyWait struct {
	sds   []slotDir
	lives []int
	in    *os.File
}

// waitAny is waitLives of several slots. A live's lock goes when the last
// descriptor of its holder's open is closed, by a release or its death,
// and the close is an inotify event on it (IN_CLOSE_NOWRITE), as are
// release --force's unlink and a move: one instance watches them all,
// polled by the runtime, so the wait has no thread of its own and leaves
// nothing behind. A close by anyone else (a status read) wakes it for one
// attempt. The kernel queues the close event just before it drops the
// lock (__fput), so an attempt made on the event can find the lock still
// there: after a wake by an event, the next wait also ends after
// recheckAfter. Where no instance or watch can be had (the user's
// fs.inotify limits, shared by all of its programs), the locks are
// probed again after recheckAfter instead: a wait that costs wake-ups,
// not one that fails.
func (a *acquirer) waitAny(ctx context.Context, slots []int) error {
	w, free, err := a.watchLives(slots)
	defer w.close()
	if err != nil || free {
		return err
	}
	if w.in == nil {
		select {
		case <-ctx.Done():
		case <-time.After(recheckAfter):
		}
		return nil
	}
	if a.recheck {
		w.in.SetReadDeadline(time.Now().Add(recheckAfter))
	}
	stop := context.AfterFunc(ctx, func() { w.in.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [4096]byte
	_, err = w.in.Read(buf[:])
	a.recheck = err == nil
	if err != nil && ctx.Err() == nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("filestore: waiting for %q: inotify: %w", a.key, err)
	}
	return nil
}

// recheckAfter bounds the wait after an attempt on a close event that
// found the lock not yet dropped (waitAny).
const recheckAfter = 100 * time.Millisecond

// watchLives opens each slot's live, watches it, and then probes its
// lock: free says one is gone or unlocked already, and nothing need be
// waited for.
func (a *acquirer) watchLives(slots []int) (w anyWait, free bool, err error) {
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err == nil {
		// Non-blocking: the runtime polls it.
		w.in = os.NewFile(uintptr(in), "inotify")
	} else if !a.pollInstead(err) {
		return w, false, fmt.Errorf("filestore: waiting for %q: inotify: %w", a.key, err)
	}
	for _, i := range slots {
		sd, err := openSlot(a.kd, i, false)
		if errors.Is(err, fs.ErrNotExist) {
			return w, true, nil
		}
		if err != nil {
			return w, false, err
		}
		w.sds = append(w.sds, slotDir{i: i, d: sd})
		fd, err := sd.OpenFile(liveFile, unix.O_RDONLY)
		if errors.Is(err, fs.ErrNotExist) {
			return w, true, nil
		}
		if err != nil {
			return w, false, err
		}
		w.lives = append(w.lives, fd)
		// Through the descriptor: the very file opened, whatever its
		// path has become since.
		const events = unix.IN_CLOSE_NOWRITE | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF
		if w.in != nil {
			if _, err := unix.InotifyAddWatch(in, "/proc/self/fd/"+strconv.Itoa(fd), events); err != nil {
				if !a.pollInstead(err) {
					return w, false, fmt.Errorf("filestore: waiting for %q: watch %s: %w", a.key, sd.Join(liveFile), err)
				}
				go w.in.Close()
				w.in = nil
			}
		}
		if held, err := statefs.ProbeFD(fd, sd.Join(liveFile)); err != nil || !held {
			return w, !held, err
		}
	}
	return w, false, nil
}

// pollInstead reports whether err, of inotify_init1 or
// inotify_add_watch, is a limit of the user's (fs.inotify's
// max_user_instances or max_user_watches) or of the kernel's memory, or
// the want of /proc (a pid namespace without its own; ENOENT), which the
// wait outlives by polling (said once).
func (a *acquirer) pollInstead(err error) bool {
	switch err {
	case unix.EMFILE, unix.ENFILE, unix.ENOSPC, unix.ENOMEM, unix.ENOENT:
	default:
		return false
	}
	if !a.saidNoInotify {
		a.saidNoInotify = true
		a.s.log.Warn("no inotify instance or watch to wait with (the user's fs.inotify limits, or no /proc); looking at the slots every 100ms instead", "key", a.key, "error", err)
	}
	return true
}

// close ends the wait: the instance first, so that closing the lives
// wakes nobody; its teardown waits for an RCU grace period (internal/notify),
// which is left to a goroutine.
func (w anyWait) close() {
	if w.in != nil {
		go w.in.Close()
	}
	for _, fd := range w.lives {
		unix.Close(fd)
	}
	closeSlots(w.sds)
}

// waitLive is waitUnlocked on slot i's live.
func (a *acquirer) waitLive(ctx context.Context, i int) error {
	sd, err := openSlot(a.kd, i, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closeSlots([]slotDir{{i: i, d: sd}})
	return waitUnlocked(ctx, sd, liveFile)
}
