package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// A key's directory is removed when it is free (prune.go). An acquirer
// may have opened the directory, or its guard, before the removal, and
// lock the guard after it: it would then hold a lock nobody else can see. So whoever is about to create state under a guard checks
// that the guard it locked is still the key's (lockKey): the directory
// still the one named keys/<enc(key)>, the guard still the one named
// guard in it. If not, it opens the key afresh. A reader (status, list)
// needs no such check: in a removed directory it finds no record, which
// is the truth, a free key.

// errMoved: the key's directory or guard is not the one we locked.
var errMoved = errors.New("filestore: key directory was removed or replaced")

// lockKey opens key's directory (creating it with create) and locks its
// guard with how (op and giveUp as lockGuard's), checking that both are
// still the key's after the lock is taken; a directory removed meanwhile
// is opened again.
func (s *Store) lockKey(ctx context.Context, key string, create bool, how int, op string, giveUp context.CancelCauseFunc) (dir, int, error) {
	for tries := 0; ; tries++ {
		kd, err := s.keyDir(key, create)
		if create && errors.Is(err, fs.ErrNotExist) && tries < 10 {
			continue // made, then removed by a prune before it was opened
		}
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

// lockExisting validates key and locks the guard of its directory
// exclusively for op, for a change to a key that is only made if the key
// has a directory: ok is false, with no error, where it has none. The
// caller closes kd and g.
func (s *Store) lockExisting(ctx context.Context, key, op string) (kd dir, g int, ok bool, err error) {
	if err := store.ValidateKey(key); err != nil {
		return dir{}, -1, false, err
	}
	kd, g, err = s.lockKey(ctx, key, false, unix.LOCK_EX, op, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return dir{}, -1, false, nil
	}
	if err != nil {
		return dir{}, -1, false, err
	}
	return kd, g, true, nil
}
