package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/fencerun/fencerun/internal/statefs"
	"golang.org/x/sys/unix"
)

// Prune removes a free key's directory: fences come from the store's
// counter (internal/fences), so nothing in it is worth keeping. It does so under
// the key's guard, held exclusively, and only when nobody holds the key
// (live is not locked), nobody waits for it (no live queue entry) and no
// dead holder's tree may still need stopping (no predecessor, no
// leftovers). Its files go first, the guard last, then the directory.
//
// An acquirer may have opened the directory, or its guard, before the
// removal, and lock the guard after it: it would then hold a lock nobody
// else can see. So whoever is about to create state under a guard checks
// that the guard it locked is still the key's (lockKey): the directory
// still the one named keys/<enc(key)>, the guard still the one named
// guard in it. If not, it opens the key afresh. A reader (status, list)
// needs no such check: in a removed directory it finds no record, which
// is the truth, a free key.

// errMoved: the key's directory or guard is not the one we locked.
var errMoved = errors.New("filestore: key directory was removed or replaced")

// lockKey opens key's directory (creating it with create) and locks its
// guard with how (op and giveUp as lockGuard's), checking that both are still the key's after the lock
// is taken; a directory removed meanwhile is opened again.
func (s *Store) lockKey(ctx context.Context, key string, create bool, how int, op string, giveUp context.CancelCauseFunc) (dir, int, error) {
	for {
		kd, err := s.keyDir(key, create)
		if err != nil {
			return kd, -1, err
		}
		g, err := s.lockGuard(ctx, kd, create, how, op, giveUp)
		if err == nil {
			err = s.guardLinked(key, kd, g)
			if err != nil {
				unix.Close(g)
			}
		}
		if err == nil {
			return kd, g, nil
		}
		kd.Close()
		// ENOENT: the guard could not be made in a removed directory.
		if !errors.Is(err, errMoved) && !(create && errors.Is(err, fs.ErrNotExist)) {
			return dir{FD: -1}, -1, err
		}
		if ctx.Err() != nil {
			return dir{FD: -1}, -1, fmt.Errorf("filestore: %q: %w", key, context.Cause(ctx))
		}
	}
}

// guardLinked checks that g, locked in kd, is still the guard of key.
func (s *Store) guardLinked(key string, kd dir, g int) error {
	var dst, gst, st unix.Stat_t
	if err := unix.Fstat(kd.FD, &dst); err != nil {
		return fmt.Errorf("filestore: stat %s: %w", kd.Path, err)
	}
	if err := unix.Fstat(g, &gst); err != nil {
		return fmt.Errorf("filestore: stat %s: %w", kd.Join(guardFile), err)
	}
	if unix.Fstatat(kd.FD, guardFile, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Ino != gst.Ino || st.Dev != gst.Dev {
		return errMoved
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if unix.Fstatat(s.keys.FD, encodeKey(key), &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Ino != dst.Ino || st.Dev != dst.Dev {
		return errMoved
	}
	return nil
}

// removeFree removes the directory of a free key, which the caller has
// checked under the guard g it holds exclusively (see above). A name in it
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

// legacyFencesFile is the per-key reservation an earlier fencerun kept in
// each key's directory; the store's counter has replaced it.
const legacyFencesFile = "fences"

// free reports whether nothing in rec is worth keeping: no holder, and no
// dead holder whose tree may still need stopping.
func (r *record) free() bool {
	return r.Holder == nil && r.Predecessor == nil && len(r.Leftovers) == 0
}
