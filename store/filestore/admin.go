package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// Status reads one key (see store.Store). It takes the key's guard shared,
// so that its probe of live never makes an acquirer see a holder that is
// not there, and writes nothing. A key without a directory is free. On
// corrupt or unsafe state it returns a Status with State Corrupt and Err
// set, and the same error.
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
	return &store.Status{Key: key, State: store.Corrupt, Waiters: []store.Holder{}, Err: err}
}

func (s *Store) status(ctx context.Context, key string) (*store.Status, error) {
	kd, err := s.keyDir(key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return &store.Status{Key: key, State: store.Free, Waiters: []store.Holder{}}, nil
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
	rec, _, err := readRecord(kd)
	if err != nil {
		return nil, err
	}
	var held bool
	if guardHolder != "" {
		held, err = unguardedLive(kd, rec.Holder != nil)
	} else {
		held, err = kd.ProbeLock(liveFile)
	}
	if err != nil {
		return nil, err
	}
	q, err := s.readQueue(kd, false, nil)
	if err != nil {
		return nil, err
	}
	st := &store.Status{Key: key, State: store.Free, Waiters: make([]store.Holder, 0, len(q))}
	for _, e := range q {
		if held && rec.Holder != nil && e.name == rec.Holder.Entry {
			continue // the holder's own, on its way out
		}
		st.Waiters = append(st.Waiters, e.w.holder())
	}
	if !held {
		// A record whose holder died is as good as free: the next
		// Acquire takes it over at once, and stops what it left.
		st.Leftovers = s.mark(rec.trees())
		return st, nil
	}
	st.State = store.Held
	st.Holder = rec.Holder.holder(rec.Fence)
	if st.Holder == nil {
		st.Holder = &store.Holder{Name: unrecordedHolder, Fence: rec.Fence}
	}
	if !st.Holder.Expires.IsZero() && s.now().After(st.Holder.Expires) {
		st.State = store.Expired
	}
	if rec.held() {
		if data, err := kd.ReadFile(cancelFile); err == nil {
			fence, ok := parseCancel(data)
			st.Holder.Cancel = ok && fence == rec.Fence
		}
	}
	return st, nil
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

// Revoke breaks the holder's lease (see store.Store): a free record with
// revoked set, keeping the fence and the holder's description (without its
// token) until the holder releases or is found dead. live stays locked by
// the holder, so nobody takes the key before the holder lets go (S1).
// It repairs the key's corrupt state first (Repair), under the same lock.
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
	rec, cur, repaired, err := s.Repair(kd, g, key)
	if err != nil {
		return false, err
	}
	cleared = cleared || repaired
	if rec.Holder != nil && !w.Picks(rec.Holder.holder(rec.Fence)) {
		return cleared, nil
	}
	switch {
	case rec.held():
		rec.Token = ""
		rec.Revoked = true
		rec.Version++
		if err := writeRecord(kd, cur, &rec); err != nil {
			return false, err
		}
		poke(kd, rec.Holder.Notify, s.log)
		if err := historyEnded(kd, rec.Holder, rec.Fence, s.now(), store.Ending{How: store.EndRevoked, By: store.Revoker(s.host)}); err != nil {
			s.log.Warn("could not write the revocation to the key's history", "key", key, "error", err)
		}
		s.log.Info("revoked", "key", key, "fence", rec.Fence, "pid", rec.Holder.PID)
		return true, nil
	case rec.Revoked && rec.Holder != nil:
		held, err := kd.ProbeLock(liveFile)
		return held || cleared, err
	}
	return cleared, nil
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

// Repair clears the corrupt state of the key in kd, whose guard the caller
// holds exclusively as g, and returns its record as it is then, and
// whether it cleared anything. An unreadable record is replaced by a
// revoked free one whose fence restarts at the larger of any fence still
// readable in it and the current Unix time in microseconds; garbage in the
// queue, and empty directories where files belong, are removed; an
// unreadable fence reservation of the store is restarted. Symlinks are not
// cleared: they stay refused as unsafe until a person looks.
func (s *Store) Repair(kd dir, g int, key string) (record, statefs.Slotted, bool, error) {
	cleared, err := s.clearLive(kd, g)
	if err != nil {
		return record{}, statefs.Slotted{}, false, err
	}
	n, err := s.clearQueue(kd)
	if err != nil {
		return record{}, statefs.Slotted{}, false, err
	}
	cleared = cleared || n > 0
	rec, cur, err := readRecord(kd)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return record{}, cur, false, err
	}
	// A reservation that cannot be read stops every acquisition in the
	// store; any key's release --force clears it.
	repaired, ferr := s.repairFences(statefs.Salvage(cur.Raw, "fence"))
	if ferr != nil {
		return record{}, cur, false, ferr
	}
	cleared = cleared || repaired
	if err != nil {
		fresh, werr := s.replaceRecord(kd, key, cur, err)
		return fresh, statefs.Slotted{}, true, werr
	}
	if stuck, err := s.fencesUsedUpAt(rec.Fence + 1); err != nil {
		return record{}, cur, false, err
	} else if stuck && !rec.held() {
		// Only damage or a hand edit puts a fence this near FenceMax
		// in a record: the next holder's, above it, would be refused as
		// used up, so the key could never be taken again. The fence
		// kept is the one a cleared record keeps.
		rec.Fence = statefs.FenceMax - 2*statefs.FenceBlock
		rec.Version++
		if err := writeRecord(kd, cur, &rec); err != nil {
			return record{}, cur, false, err
		}
		s.log.Warn("lowered a lease record's fence that left none to hand out above it", "path", kd.Join(leaseFile), "fence", rec.Fence)
		return rec, statefs.Slotted{}, true, nil
	}
	return rec, cur, cleared, nil
}

// clearLive removes what stands where live belongs and is no regular file,
// or is the guard under a second name (acquirer.attempt refuses it as
// corrupt): the next take makes live anew.
func (s *Store) clearLive(kd dir, g int) (bool, error) {
	cleared := false
	if err := kd.ClearJunk(liveFile); err == nil {
		cleared = true
	} else if !errors.Is(err, statefs.ErrNoJunk) {
		return false, err
	}
	id, _, err := kd.Named(liveFile)
	if err != nil {
		return cleared, nil
	}
	if gid, err := statefs.IDOf(g, kd.Join(guardFile)); err == nil && gid == id {
		if err := unix.Unlinkat(kd.FD, liveFile, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return false, fmt.Errorf("clear %s, a second name of the guard %s: %w", kd.Join(liveFile), kd.Join(guardFile), err)
		}
		s.log.Warn("cleared a lock file that was the guard under a second name (a hard link)", "path", kd.Join(liveFile))
		cleared = true
	}
	return cleared, nil
}

// replaceRecord replaces the record that cannot be read (cur, cause) by a
// revoked free one. The fence kept is only shown: the next holder's comes
// from the store's counter, above every fence the store ever handed out.
func (s *Store) replaceRecord(kd dir, key string, cur statefs.Slotted, cause error) (record, error) {
	if err := kd.ClearJunk(leaseFile); err != nil && !errors.Is(err, statefs.ErrNoJunk) {
		return record{}, err
	}
	fence := min(statefs.Salvage(cur.Raw, "fence"), statefs.FenceMax-2*statefs.FenceBlock)
	fresh := record{Fence: fence, Version: statefs.Salvage(cur.Raw, "version") + 1, Revoked: true}
	if err := writeRecord(kd, statefs.Slotted{}, &fresh); err != nil {
		return record{}, err
	}
	poke(kd, salvageNotify(cur.Raw), s.log) // a holder may still run under it
	s.log.Warn("cleared a corrupt lease record", "key", key, "cause", cause, "fence", fence)
	return fresh, nil
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
		if err := qd.ClearJunk(name); errors.Is(err, statefs.ErrNoJunk) {
			err = unix.Unlinkat(qd.FD, name, 0)
			if err != nil && err != unix.ENOENT {
				return n, fmt.Errorf("filestore: remove %s: %w", qd.Join(name), err)
			}
		} else if err != nil {
			return n, err
		}
		s.log.Warn("removed a corrupt queue entry", "path", qd.Join(name))
		n++
	}
	return n, nil
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

// Cancel asks the holder to stop gracefully (see store.Store): it writes
// the holder's fence to the cancel file, which the holder's watch sees.
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
	rec, _, err := readRecord(kd)
	if err != nil || !rec.held() || !w.Picks(rec.Holder.holder(rec.Fence)) {
		return false, err
	}
	if held, err := kd.ProbeLock(liveFile); err != nil || !held {
		return false, err
	}
	if _, err := kd.WriteAtomic(cancelFile, formatCancel(rec.Fence), statefs.WriteOpts{}); err != nil {
		return false, err
	}
	poke(kd, rec.Holder.Notify, s.log)
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
	var out []store.Pruned
	// Under the guard no write is in flight, so every temporary file is a
	// crashed writer's.
	removeTemps := func(d dir) {
		names, _ := d.List()
		for _, name := range names {
			if strings.HasPrefix(name, statefs.TempPrefix) && unix.Unlinkat(d.FD, name, 0) == nil {
				out = append(out, store.Pruned{Key: key, What: "temp file", Path: d.Join(name)})
			}
		}
	}
	removeTemps(kd)
	// The sockets of holders that died without removing them. Under the
	// guard no acquirer is binding one; a live holder's is never stale.
	names, _ := kd.List()
	for _, name := range names {
		if (isNotifyName(name) || isAwaitName(name)) && unixsock.RemoveStale(kd.FD, kd.Path, name) {
			out = append(out, store.Pruned{Key: key, What: "stale socket", Path: kd.Join(name)})
		}
	}
	if qd, err := kd.OpenDir(queueDir, false); err == nil {
		removeTemps(qd)
		qd.Close()
	}
	rec, cur, err := readRecord(kd)
	if err != nil {
		return out, err
	}
	q, err := s.readQueue(kd, true, func(path string) {
		out = append(out, store.Pruned{Key: key, What: "dead waiter", Path: path})
	})
	if err != nil {
		return out, err
	}
	held, err := kd.ProbeLock(liveFile)
	if err != nil || held {
		return out, err
	}
	if rec.free() && len(q) == 0 {
		removed, err := s.removeFree(key, kd)
		if removed {
			out = append(out, store.Pruned{Key: key, What: "free key", Path: kd.Path})
		}
		return out, err
	}
	if rec.Holder == nil || !s.now().After(rec.Holder.Expires) {
		return out, nil
	}
	free := record{Fence: rec.Fence, Version: rec.Version + 1, Predecessor: rec.Holder, Leftovers: rec.Leftovers}
	if err := writeRecord(kd, cur, &free); err != nil {
		return out, err
	}
	if !rec.Revoked {
		if err := historyEnded(kd, rec.Holder, rec.Fence, time.Time{}, store.Ending{How: store.EndUnknown}); err != nil {
			s.log.Warn("could not write the dead holder's holding to the key's history", "key", key, "error", err)
		}
	}
	out = append(out, store.Pruned{Key: key, What: "expired lease", Path: kd.Join(leaseFile)})
	return out, nil
}
