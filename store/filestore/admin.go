package filestore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// Status reads one key (see store.Store). It takes the key's guard shared,
// so that its probes of the slots' live never make an acquirer see a
// holder that is not there, and writes nothing. A key without a directory
// is free. On corrupt or unsafe state it returns a Status with State
// Corrupt and Err set, and the same error.
func (s *Store) Status(ctx context.Context, key string) (*store.Status, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, err
	}
	st, err := s.status(ctx, key)
	if err != nil {
		return corruptStatus(key, err), err
	}
	return st, nil
}

func corruptStatus(key string, err error) *store.Status {
	return &store.Status{Key: key, State: store.Corrupt, Holders: []store.Holder{}, Waiters: []store.Holder{}, Err: err}
}

func (s *Store) status(ctx context.Context, key string) (*store.Status, error) {
	st := &store.Status{Key: key, State: store.Free, Holders: []store.Holder{}, Waiters: []store.Holder{}}
	kd, err := s.keyDir(key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	defer kd.Close()
	g, guardHolder, err := s.lockGuardRead(ctx, kd)
	switch {
	case errors.Is(err, fs.ErrNotExist): // never mutated: nothing to exclude
	case err != nil:
		return nil, err
	case guardHolder != "":
		// A process stopped or wedged while it changed the key holds
		// its guard. The record's slots are whole for a reader without
		// it (internal/statefs, slotted.go): what is read is a record
		// written whole, the last one or the one just before.
		if _, said := s.unguarded.LoadOrStore(key+"\x00"+guardHolder, true); !said {
			s.log.Warn("the key's guard lock is held by "+guardHolder+"; read without it, the answer may be momentarily stale", "key", key, "path", kd.Join(guardFile))
		}
	default:
		defer unix.Close(g)
	}
	sds, err := openSlots(kd)
	if err != nil {
		return nil, err
	}
	defer closeSlots(sds)
	entries := map[string]bool{} // the holders' own, on their way out
	for _, sd := range sds {
		h, trees, err := s.slotStatus(kd, sd.d, guardHolder != "")
		if err != nil {
			return nil, err
		}
		if h == nil {
			// A record whose holder died is as good as free: the next
			// taker of its slot (or an exclusive one) takes it over at
			// once, and stops what it left.
			st.Leftovers = store.PassOn(st.Leftovers, s.mark(trees)...)
			continue
		}
		st.Holders = append(st.Holders, h.Holder)
		entries[h.entry] = true
	}
	q, err := s.readQueue(kd, false, nil)
	if err != nil {
		return nil, err
	}
	for _, e := range q {
		if !entries[e.name] {
			st.Waiters = append(st.Waiters, e.w.holder())
		}
	}
	s.sumUp(st)
	return st, nil
}

// slotHolder is a live holder of a slot as status shows it, and the
// queue entry it waited in.
type slotHolder struct {
	store.Holder
	entry string
}

// slotStatus reads the slot sd of the key kd: its live holder, or nil and
// the trees its dead holders may have left. unguarded: the caller could
// not take the guard (unguardedLive).
func (s *Store) slotStatus(kd, sd dir, unguarded bool) (*slotHolder, []store.Leftover, error) {
	rec, _, err := readRecord(sd)
	if err != nil {
		return nil, nil, err
	}
	var held bool
	if unguarded {
		held, err = unguardedLive(kd, sd, rec.Holder != nil)
	} else {
		held, err = sd.ProbeLock(liveFile)
	}
	if err != nil || !held {
		return nil, rec.trees(), err
	}
	h := &slotHolder{Holder: store.Holder{Kind: store.KindExclusive, Name: unrecordedHolder, Fence: rec.Fence}}
	if rec.Holder != nil {
		h.Holder, h.entry = *rec.Holder.holder(rec.Fence), rec.Holder.Entry
	}
	if rec.held() {
		if data, err := sd.ReadFile(cancelFile); err == nil {
			fence, ok := parseCancel(data)
			h.Cancel = ok && fence == rec.Fence
		}
	}
	return h, nil, nil
}

// sumUp sets st's State and Holder from its Holders (M3): held if any
// holds, expired only if every one is past its expiry; Holder only for an
// exclusive hold. Shared holders are listed by fence (their slots are
// the store's business), slot holders by slot, as read.
func (s *Store) sumUp(st *store.Status) {
	if len(st.Holders) == 0 {
		return
	}
	if st.Holders[0].Kind == store.KindShared {
		slices.SortFunc(st.Holders, func(a, b store.Holder) int { return cmp.Compare(a.Fence, b.Fence) })
	}
	st.State = store.Expired
	now := s.now()
	for _, h := range st.Holders {
		if h.Expires.IsZero() || !now.After(h.Expires) {
			st.State = store.Held
		}
	}
	if h := st.Holders[0]; len(st.Holders) == 1 && h.Kind == store.KindExclusive {
		st.Holder = &h
	}
}

// List reads every key (see store.Store), a few at a time in parallel. A
// key whose state cannot be read is listed as Corrupt with Err set.
func (s *Store) List(ctx context.Context) ([]store.Status, error) {
	keys, err := s.keyNames()
	if err != nil {
		return nil, err
	}
	out := make([]store.Status, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(4, len(keys)) {
		wg.Go(func() {
			for i := range next {
				st, err := s.status(ctx, keys[i])
				if err != nil {
					st = corruptStatus(keys[i], err)
				}
				out[i] = *st
			}
		})
	}
	for i := range keys {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("filestore: list: %w", context.Cause(ctx))
	}
	return out, nil
}

// Revoke breaks the lease of each holder w picks (see store.Store): its
// slot's record becomes a free record with revoked set, keeping the fence
// and the holder's description (without its token) until the holder
// releases or is found dead. live stays locked by the holder, so nobody
// takes its slot before the holder lets go (S1). It repairs the key's
// corrupt state first (repair), under the same lock.
func (s *Store) Revoke(ctx context.Context, key string, w store.Which) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	kd, err := s.keyDir(key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer kd.Close()
	g, cleared, err := s.lockToRepair(ctx, kd)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // pruned as we opened it: free
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(g)
	repaired, err := s.repair(kd, g, key)
	if err != nil {
		return false, err
	}
	sds, err := openSlots(kd)
	if err != nil {
		return false, err
	}
	defer closeSlots(sds)
	revoked := cleared || repaired
	for _, sd := range sds {
		ok, err := s.revokeSlot(kd, sd.d, key, w)
		if err != nil {
			return false, err
		}
		revoked = revoked || ok
	}
	return revoked, nil
}

// revokeSlot revokes the holder of the slot sd if w picks it; it reports
// whether it did, or whether it had been revoked and still runs.
func (s *Store) revokeSlot(kd, sd dir, key string, w store.Which) (bool, error) {
	rec, cur, err := readRecord(sd)
	if err != nil || rec.Holder == nil || !w.Picks(rec.Holder.holder(rec.Fence)) {
		return false, err
	}
	if !rec.held() {
		return sd.ProbeLock(liveFile) // revoked, maybe still stopping
	}
	rec.Token = ""
	rec.Revoked = true
	rec.Version++
	if err := writeRecord(sd, cur, &rec); err != nil {
		return false, err
	}
	poke(sd, rec.Holder.Notify, s.log)
	if err := historyEnded(kd, rec.Holder, rec.Fence, s.now(), store.Ending{How: store.EndRevoked, By: store.Revoker(s.host)}); err != nil {
		s.log.Warn("could not write the revocation to the key's history", "key", key, "error", err)
	}
	s.log.Info("revoked", "key", key, "fence", rec.Fence, "pid", rec.Holder.PID)
	return true, nil
}

// lockToRepair takes kd's guard exclusively for release --force; a guard
// that is no regular file (corrupt) is cleared first, which it reports.
func (s *Store) lockToRepair(ctx context.Context, kd dir) (int, bool, error) {
	g, err := s.lockGuard(ctx, kd, true, unix.LOCK_EX, "release --force", nil)
	if !errors.Is(err, store.ErrCorrupt) {
		return g, false, err
	}
	if err := kd.ClearJunk(guardFile); err != nil {
		return -1, false, err
	}
	g, err = s.lockGuard(ctx, kd, true, unix.LOCK_EX, "release --force", nil)
	return g, true, err
}

// repair clears the corrupt state of the key in kd, whose guard the
// caller holds exclusively as g, and reports whether it cleared anything:
// garbage in the queue and in holders, then each slot's (repairSlot).
// Symlinks are not cleared: they stay refused as unsafe until a person
// looks.
func (s *Store) repair(kd dir, g int, key string) (bool, error) {
	n, err := s.clearQueue(kd)
	if err != nil {
		return false, err
	}
	cleared, err := s.clearHolders(kd)
	if err != nil {
		return false, err
	}
	cleared = cleared || n > 0
	sds, err := openSlots(kd)
	if err != nil {
		return false, err
	}
	defer closeSlots(sds)
	lives := map[statefs.FileID]bool{}
	for _, sd := range sds {
		c, err := s.repairSlot(kd, sd.d, g, key, lives)
		if err != nil {
			return false, err
		}
		cleared = cleared || c
	}
	return cleared, nil
}

// repairSlot clears the corrupt state of the slot sd of kd. An unreadable
// record is replaced by a revoked free one whose fence restarts at the
// larger of any fence still readable in it and the current Unix time in
// microseconds; empty directories where files belong are removed, and a
// live that is a second name of the guard or of another slot's (lives,
// those seen so far); an unreadable fence reservation of the store is
// restarted.
func (s *Store) repairSlot(kd, sd dir, g int, key string, lives map[statefs.FileID]bool) (bool, error) {
	cleared, err := s.clearLive(kd, sd, g, lives)
	if err != nil {
		return false, err
	}
	rec, cur, err := readRecord(sd)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return false, err
	}
	// A reservation that cannot be read stops every acquisition in the
	// store; any key's release --force clears it.
	repaired, ferr := s.repairFences(statefs.Salvage(cur.Raw, "fence"))
	if ferr != nil {
		return false, ferr
	}
	cleared = cleared || repaired
	if err != nil {
		return true, s.replaceRecord(sd, key, cur, err)
	}
	if stuck, err := s.fencesUsedUpAt(rec.Fence + 1); err != nil {
		return false, err
	} else if stuck && !rec.held() {
		// Only damage or a hand edit puts a fence this near FenceMax
		// in a record: the next holder's, above it, would be refused as
		// used up, so the key could never be taken again. The fence
		// kept is the one a cleared record keeps.
		rec.Fence = statefs.FenceMax - 2*statefs.FenceBlock
		rec.Version++
		if err := writeRecord(sd, cur, &rec); err != nil {
			return false, err
		}
		s.log.Warn("lowered a lease record's fence that left none to hand out above it", "path", sd.Join(leaseFile), "fence", rec.Fence)
		return true, nil
	}
	return cleared, nil
}

// clearLive removes what stands where live belongs in the slot sd and is
// no regular file, or is the guard or another slot's live under a second
// name (acquirer.attempt refuses it as corrupt): the next take makes live
// anew.
func (s *Store) clearLive(kd, sd dir, g int, lives map[statefs.FileID]bool) (bool, error) {
	cleared := false
	if err := sd.ClearJunk(liveFile); err == nil {
		cleared = true
	} else if !errors.Is(err, statefs.ErrNoJunk) {
		return false, err
	}
	id, _, err := sd.Named(liveFile)
	if err != nil {
		return cleared, nil
	}
	what := ""
	if gid, err := statefs.IDOf(g, kd.Join(guardFile)); err == nil && gid == id {
		what = "the guard"
	} else if lives[id] {
		what = "another slot's lock file"
	}
	lives[id] = true
	if what != "" {
		if err := unix.Unlinkat(sd.FD, liveFile, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return false, fmt.Errorf("clear %s, a second name of %s: %w", sd.Join(liveFile), what, err)
		}
		s.log.Warn("cleared a lock file that was "+what+" under a second name (a hard link)", "path", sd.Join(liveFile))
		cleared = true
	}
	return cleared, nil
}

// replaceRecord replaces the record of the slot sd that cannot be read
// (cur, cause) by a revoked free one. The fence kept is only shown: the
// next holder's comes from the store's counter, above every fence the
// store ever handed out.
func (s *Store) replaceRecord(sd dir, key string, cur statefs.Slotted, cause error) error {
	if err := sd.ClearJunk(leaseFile); err != nil && !errors.Is(err, statefs.ErrNoJunk) {
		return err
	}
	fence := min(statefs.Salvage(cur.Raw, "fence"), statefs.FenceMax-2*statefs.FenceBlock)
	fresh := record{Fence: fence, Version: statefs.Salvage(cur.Raw, "version") + 1, Revoked: true}
	if err := writeRecord(sd, statefs.Slotted{}, &fresh); err != nil {
		return err
	}
	poke(sd, salvageNotify(cur.Raw), s.log) // a holder may still run under it
	s.log.Warn("cleared a corrupt lease record", "key", key, "cause", cause, "fence", fence)
	return nil
}

// clearQueue removes what in a key's queue is not a live waiter's entry:
// dead waiters' entries and garbage. The caller holds the guard exclusively.
func (s *Store) clearQueue(kd dir) (int, error) {
	qd, err := kd.OpenDir(queueDir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer qd.Close()
	names, err := qd.List()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if strings.HasPrefix(name, statefs.TempPrefix) {
			continue
		}
		_, alive, err := readEntry(qd, name)
		if _, ok := parseSeq(name); ok && err == nil {
			if !alive {
				unix.Unlinkat(qd.FD, name, 0)
			}
			continue
		}
		if errors.Is(err, store.ErrUnsafe) {
			return n, err
		}
		if err := removeJunk(qd, name); err != nil {
			return n, err
		}
		s.log.Warn("removed a corrupt queue entry", "path", qd.Join(name))
		n++
	}
	return n, nil
}

// clearHolders removes what in a key's holders is no slot directory, and
// holders itself where it is no directory. The caller holds the guard
// exclusively.
func (s *Store) clearHolders(kd dir) (bool, error) {
	hd, err := kd.OpenDir(holdersDir, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case errors.Is(err, store.ErrCorrupt):
		s.log.Warn("removed a corrupt holders directory", "path", kd.Join(holdersDir))
		return true, removeJunk(kd, holdersDir)
	case err != nil:
		return false, err
	}
	defer hd.Close()
	names, err := hd.List()
	if err != nil {
		return false, err
	}
	cleared := false
	for _, name := range names {
		var st unix.Stat_t
		_, ok := parseSlotName(name)
		if strings.HasPrefix(name, statefs.TempPrefix) || ok && unix.Fstatat(hd.FD, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if err := removeJunk(hd, name); err != nil {
			return cleared, err
		}
		s.log.Warn("removed what is no holder's slot", "path", hd.Join(name))
		cleared = true
	}
	return cleared, nil
}

// removeJunk removes name in d, which is not what belongs there: a
// regular file, an empty directory, a FIFO...; never a symlink
// (statefs.Dir.ClearJunk).
func removeJunk(d dir, name string) error {
	err := d.ClearJunk(name)
	if errors.Is(err, statefs.ErrNoJunk) {
		err = unix.Unlinkat(d.FD, name, 0)
		if err != nil && err != unix.ENOENT {
			return fmt.Errorf("filestore: remove %s: %w", d.Join(name), err)
		}
		return nil
	}
	return err
}

// notifyRE is compiled when first needed: at package init it cost every
// fencerun start a third of a millisecond, for a repair that is rare.
var notifyRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`"notify"\s*:\s*"(` + regexp.QuoteMeta(notifyPrefix) + `n-[0-9a-f]{32})"`)
})

func salvageNotify(data []byte) string {
	if m := notifyRE().FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return ""
}

// Cancel asks each holder w picks to stop gracefully (see store.Store):
// it writes the holder's fence to its slot's cancel file, which the
// holder's watch sees.
func (s *Store) Cancel(ctx context.Context, key string, w store.Which) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	kd, err := s.keyDir(key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer kd.Close()
	g, err := s.lockGuard(ctx, kd, true, unix.LOCK_EX, "cancel", nil)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // pruned as we opened it: free
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(g)
	sds, err := openSlots(kd)
	if err != nil {
		return false, err
	}
	defer closeSlots(sds)
	asked := false
	for _, sd := range sds {
		ok, err := s.cancelSlot(sd.d, key, w)
		if err != nil {
			return false, err
		}
		asked = asked || ok
	}
	return asked, nil
}

// cancelSlot asks the live holder of the slot sd to cancel if w picks it.
func (s *Store) cancelSlot(sd dir, key string, w store.Which) (bool, error) {
	rec, _, err := readRecord(sd)
	if err != nil || !rec.held() || !w.Picks(rec.Holder.holder(rec.Fence)) {
		return false, err
	}
	if held, err := sd.ProbeLock(liveFile); err != nil || !held {
		return false, err
	}
	if _, err := sd.WriteAtomic(cancelFile, formatCancel(rec.Fence), statefs.WriteOpts{}); err != nil {
		return false, err
	}
	poke(sd, rec.Holder.Notify, s.log)
	s.log.Info("asked the holder to cancel", "key", key, "fence", rec.Fence, "pid", rec.Holder.PID)
	return true, nil
}

// Prune removes what dead processes left (see store.Store): the records of
// holders that died holding a lease that has since expired (rewritten as
// free records that keep the fence, and the dead holder as predecessor so
// the next holder still stops its leftovers), dead waiters' queue entries,
// stray temporary files, and the directories of free keys (prune.go): the
// next fence of a removed key still comes from the store's counter, above
// every earlier one. Keys whose state cannot be read are left alone; List
// shows them.
func (s *Store) Prune(ctx context.Context) ([]store.Pruned, error) {
	keys, err := s.keyNames()
	if err != nil {
		return nil, err
	}
	out := []store.Pruned{}
	for _, key := range keys {
		if ctx.Err() != nil {
			return out, fmt.Errorf("filestore: prune: %w", context.Cause(ctx))
		}
		p, err := s.pruneKey(ctx, key)
		out = append(out, p...)
		if err != nil {
			s.log.Warn("not pruning a key whose state cannot be read", "key", key, "error", err)
		}
	}
	return append(out, s.pruneTicks()...), nil
}

// pruneTicks removes the tick sockets of runs that died without removing
// theirs (SIGKILL): those no socket is bound to (unixsock.Stale), never a
// live run's, in whichever network namespace it runs.
func (s *Store) pruneTicks() []store.Pruned {
	s.mu.RLock() // keeps s.top open
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	d, err := s.top.OpenDir(ticksDir, false)
	if err != nil {
		return nil // none yet, or a problem TickDir names
	}
	defer d.Close()
	names, _ := d.List()
	var out []store.Pruned
	for _, name := range names {
		// A run killed between its socket's bind and rename left it
		// under the temporary name (unixsock.LeftInBind).
		final, tmp := strings.CutPrefix(name, unixsock.BindPrefix)
		if !strings.HasPrefix(final, tickPrefix) || !isHex(final[len(tickPrefix):], 32) {
			continue
		}
		if tmp && unixsock.LeftInBind(d.FD, d.Path, name) && unix.Unlinkat(d.FD, name, 0) == nil ||
			!tmp && unixsock.RemoveStale(d.FD, d.Path, name) {
			out = append(out, store.Pruned{What: "stale socket", Path: d.Join(name)})
		}
	}
	return out
}

// tickPrefix and 32 hex digits name a tick socket (ticksock.Listen).
const tickPrefix = "t-"

func (s *Store) pruneKey(ctx context.Context, key string) ([]store.Pruned, error) {
	kd, g, err := s.lockKey(ctx, key, false, unix.LOCK_EX, "prune", nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // removed meanwhile
	}
	if err != nil {
		return nil, err
	}
	defer kd.Close()
	defer unix.Close(g)
	p := &pruning{s: s, key: key}
	p.removeLeft(kd, true)
	if qd, err := kd.OpenDir(queueDir, false); err == nil {
		p.removeLeft(qd, false)
		qd.Close()
	}
	sds, err := openSlots(kd)
	if err != nil {
		return p.out, err
	}
	defer closeSlots(sds)
	if _, _, err := readRecord(kd); err != nil {
		return p.out, err
	}
	q, err := s.readQueue(kd, true, func(path string) {
		p.out = append(p.out, store.Pruned{Key: key, What: "dead waiter", Path: path})
	})
	if err != nil {
		return p.out, err
	}
	free := true
	for _, sd := range sds {
		f, err := p.slot(kd, sd)
		if err != nil {
			return p.out, err
		}
		free = free && f
	}
	if len(sds) > 1 { // the last slot removed: holders goes too
		unix.Unlinkat(kd.FD, holdersDir, unix.AT_REMOVEDIR)
	}
	if free && len(q) == 0 {
		removed, err := s.removeFree(key, kd)
		if removed {
			p.out = append(p.out, store.Pruned{Key: key, What: "free key", Path: kd.Path})
		}
		return p.out, err
	}
	return p.out, nil
}

// pruning is one key's prune: what it removed.
type pruning struct {
	s   *Store
	key string
	out []store.Pruned
}

// removeLeft removes what crashed writers left in d: temporary files
// (under the guard no write is in flight, so every one is a crashed
// writer's), and with sockets the sockets of holders that died without
// removing them (under the guard no acquirer is binding one; a live
// holder's is never stale).
func (p *pruning) removeLeft(d dir, sockets bool) {
	names, _ := d.List()
	for _, name := range names {
		switch {
		case strings.HasPrefix(name, statefs.TempPrefix):
			if unix.Unlinkat(d.FD, name, 0) == nil {
				p.out = append(p.out, store.Pruned{Key: p.key, What: "temp file", Path: d.Join(name)})
			}
		case sockets && (isNotifyName(name) || isAwaitName(name)):
			if unixsock.RemoveStale(d.FD, d.Path, name) {
				p.out = append(p.out, store.Pruned{Key: p.key, What: "stale socket", Path: d.Join(name)})
			}
		}
	}
}

// slot prunes the slot sd of kd: the record of a holder that died
// holding a lease since expired becomes a free record that keeps the
// fence, and the dead holder as predecessor so that the slot's next
// holder still stops its leftovers; a free slot's directory (but slot
// 0's, the key's) is removed. It reports whether the slot is free.
func (p *pruning) slot(kd dir, sd slotDir) (bool, error) {
	d := sd.d
	if sd.i > 0 {
		p.removeLeft(d, true)
	}
	rec, cur, err := readRecord(d)
	if err != nil {
		return false, err
	}
	held, err := d.ProbeLock(liveFile)
	if err != nil || held {
		return false, err
	}
	if rec.free() {
		if sd.i > 0 {
			p.s.removeFreeSlot(kd, sd)
		}
		return true, nil
	}
	if rec.Holder == nil || !p.s.now().After(rec.Holder.Expires) {
		return false, nil
	}
	free := record{Fence: rec.Fence, Version: rec.Version + 1, Predecessor: rec.Holder, Leftovers: rec.Leftovers}
	if err := writeRecord(d, cur, &free); err != nil {
		return false, err
	}
	if !rec.Revoked {
		if err := historyEnded(kd, rec.Holder, rec.Fence, time.Time{}, store.Ending{How: store.EndUnknown}); err != nil {
			p.s.log.Warn("could not write the dead holder's holding to the key's history", "key", p.key, "error", err)
		}
	}
	p.out = append(p.out, store.Pruned{Key: p.key, What: "expired lease", Path: d.Join(leaseFile)})
	return false, nil
}
