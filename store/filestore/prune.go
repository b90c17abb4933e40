package filestore

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
)

// Prune removes a free key's directory: fences come from the store's
// counter (internal/statefs), so nothing in it is worth keeping, unless
// the key has done IDs (once.go), which are kept with it. It does so under
// the key's guard, held exclusively, and only when nobody holds the key
// (live is not locked), nobody waits for it (no live queue entry) and no
// dead holder's tree may still need stopping (no predecessor, no
// leftovers). Its files go first, the guard last, then the directory.

// removeFree removes the directory of a free key, which the caller has
// checked under the guard g it holds exclusively (keylock.go). A name in it
// that fencerun did not put there keeps the directory, and the key.
func (s *Store) removeFree(key string, kd dir) (bool, error) {
	names, err := kd.List()
	if err != nil {
		return false, err
	}
	for _, name := range names {
		switch {
		case name == leaseFile, name == liveFile, name == cancelFile, name == legacyFencesFile,
			strings.HasPrefix(name, statefs.TempPrefix), isNotifyName(name):
		case name == guardFile, name == queueDir:
			continue
		case name == holdersDir:
			return false, nil // a slot is not free (pruneKey removes free ones)
		case name == doneFile:
			return false, nil // its done IDs are kept (O3)
		case isAwaitName(name):
			if !unixsock.RemoveStale(kd.FD, kd.Path, name) {
				return false, nil // a live run awaits a mark here
			}
		case isHistoryName(name):
			return false, nil // its history is kept (N2), until prune --history
		default:
			s.log.Debug("keeping a key directory with a name that is not ours", "path", kd.Join(name))
			return false, nil
		}
	}
	if err := unix.Unlinkat(kd.FD, queueDir, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return false, nil // something left in the queue: keep the key
	}
	for _, name := range names {
		if name == guardFile || name == queueDir {
			continue
		}
		if err := unix.Unlinkat(kd.FD, name, 0); err != nil && err != unix.ENOENT {
			return false, fmt.Errorf("filestore: remove %s: %w", kd.Join(name), err)
		}
	}
	if err := unix.Unlinkat(kd.FD, guardFile, 0); err != nil && err != unix.ENOENT {
		return false, fmt.Errorf("filestore: remove %s: %w", kd.Join(guardFile), err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	// Not empty: an acquirer made a guard in it since; the key is its.
	if err := unix.Unlinkat(s.keys.FD, encodeKey(key), unix.AT_REMOVEDIR); err != nil {
		if err == unix.ENOTEMPTY || err == unix.EEXIST {
			return false, nil
		}
		return false, fmt.Errorf("filestore: remove %s: %w", kd.Path, err)
	}
	return true, nil
}

// removeFreeSlot removes the directory of the free slot sd (i >= 1) of
// kd, which the caller has checked under the guard it holds exclusively:
// its record free, its live unlocked. A name in it that fencerun did not
// put there keeps it. A waiter that sleeps on its live (holders.go) wakes,
// as it does when the slot's holder goes; the next taker makes it anew.
func (s *Store) removeFreeSlot(kd dir, sd slotDir) {
	names, err := sd.d.List()
	if err != nil {
		return
	}
	for _, name := range names {
		if name != leaseFile && name != liveFile && name != cancelFile && !isNotifyName(name) {
			s.log.Debug("keeping a slot directory with a name that is not ours", "path", sd.d.Join(name))
			return
		}
	}
	for _, name := range names {
		if err := unix.Unlinkat(sd.d.FD, name, 0); err != nil && err != unix.ENOENT {
			return
		}
	}
	hd, err := kd.OpenDir(holdersDir, false)
	if err != nil {
		return
	}
	defer hd.Close()
	unix.Unlinkat(hd.FD, slotName(sd.i), unix.AT_REMOVEDIR)
}

// legacyFencesFile is the per-key reservation an earlier fencerun kept in
// each key's directory; the store's counter has replaced it.
const legacyFencesFile = "fences"

// free reports whether nothing in rec is worth keeping: no holder, and no
// dead holder whose tree may still need stopping.
func (r *record) free() bool {
	return r.Holder == nil && r.Predecessor == nil && len(r.Leftovers) == 0
}
