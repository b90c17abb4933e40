package filestore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// Moved and unlinked state (S9). The kernel lock on live proves a holder
// alive only while live is the file every newcomer opens. Whoever can write
// the state tree (its owner, a cleanup script, a member of a group store)
// can move or delete the key directory, or the whole root, under a running
// holder, and the next run would then make a fresh key directory, lock a
// fresh live file and start beside it. Two things close that:
//
//   - A holder checks every second (and at every Check) that the key
//     directory's path, resolved from the root's path afresh, still names
//     the directory it holds open, that live in it is the file it locked,
//     and that guard and lease in it are the files it keeps open for its
//     renewals. When not, it has lost the lease: Check returns
//     store.ErrLost, the keeper stops the command and fencerun exits 76.
//   - A second lock that nothing can unlink: from acquisition until its
//     release (after its command's tree is gone), a holder holds an abstract
//     unix socket name derived from the root's real path, the key and its
//     slot (unixsock.Claim; holders.go). A newcomer that has won live still needs that name;
//     while a holder whose files were moved away holds it, the newcomer
//     waits (or, without --wait, is busy), so it never starts its command
//     beside that holder's tree. A release gives the name up before it
//     unlocks live, so the next waiter never waits on it.
//
// What this does not cover: abstract names are per network namespace, so a
// newcomer in another one does not meet the claim (the holder still stops
// within a second); and a name held by a user who is not the store's (who
// could only squat it) is ignored, never waited for, so that nobody can
// block a key: a squatter who binds the name before the holder does thus
// leaves a holder whose files are then moved without its claim, and a
// newcomer can start beside it until its path check (within a second)
// stops it. Closing that needs a claim name strangers cannot compute, which
// a store replaced whole must still lead to: not done. Nor does a claim
// cover another slot: a key directory moved away under shared or slot
// holders lets a newcomer take another slot, or slot 0 exclusively,
// beside them until their path check stops them (within a second).

// pathCheckEvery is how often a holder checks that its files are still
// where newcomers look.
const pathCheckEvery = time.Second

// claimName is the abstract socket name of the holder of slot of key in
// this store (slot 0's as it always was).
func (s *Store) claimName(key string, slot int) string {
	in := s.real + "\x00" + key
	if slot > 0 {
		in += "\x00" + slotName(slot)
	}
	sum := sha256.Sum256([]byte(in))
	return "fencerun/holder/" + hex.EncodeToString(sum[:16])
}

// trusted reports whether uid is one of this store's users (whose claims
// are believed).
func (s *Store) trusted(uid int) bool {
	return uid == os.Geteuid() || uid == 0 || s.access.Shared && statefs.IsMember(uid, s.access.GID)
}

// claim takes the claim of slot of key. A claim held by one of the
// store's users is a live holder whose files were moved away: held is
// true. A claim held by anyone else is ignored (nil, false).
func (s *Store) claim(key string, slot int) (c *unixsock.Claim, held bool, err error) {
	c, uid, err := unixsock.TakeClaim(s.claimName(key, slot))
	if err != nil || c != nil {
		return c, false, err
	}
	if uid >= 0 && s.trusted(uid) {
		return nil, true, nil
	}
	s.log.Warn("the holder claim of a key is held by a stranger; ignoring it", "key", key, "uid", uid)
	return nil, false, nil
}

// stillThere says, in an error wrapping store.ErrLost, when the key
// directory's path no longer names the directory open as l.kd (nor
// holders/<i> in it l.sd), live in the slot is no longer the file l holds
// locked, or guard or lease is no longer the file the lease was taken
// under (or last wrote whole): a
// guard replaced or unlinked would no longer exclude the next writer
// from a renewal on the one kept open (lockKeptGuard), and a record replaced
// is one only a revocation writes whole under the holder. What l holds
// open is looked at once; each name is a stat.
func (l *Lease) stillThere() error {
	if !l.heldKnown {
		// The path, made once: joining and encoding it at each renewal
		// was 2% of a holder's CPU on cold caches (perf, P4).
		l.keyPath = filepath.Join(l.s.root, "keys", encodeKey(l.key))
		var err error
		if l.heldDir, err = statefs.IDOf(l.kd.FD, l.keyPath); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		if l.heldLive, err = statefs.IDOf(l.live, l.sd.Join(liveFile)); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		if l.heldSlot, err = statefs.IDOf(l.sd.FD, l.sd.Path); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		l.heldKnown = true
	}
	// Lstat: a symlink planted under the key directory's name (even to
	// the directory held) is a moved directory, which newcomers refuse.
	path := l.keyPath
	var named unix.Stat_t
	if err := unix.Lstat(path, &named); err != nil || (statefs.FileID{Dev: named.Dev, Ino: named.Ino}) != l.heldDir {
		return fmt.Errorf("%w: the key directory %s of %q (fence %d) was moved or deleted", store.ErrLost, path, l.key, l.fence)
	}
	if l.slot > 0 {
		if id, _, err := l.kd.Named(holdersDir + "/" + slotName(l.slot)); err != nil || id != l.heldSlot {
			return fmt.Errorf("%w: the slot directory %s of %q (fence %d) was moved or deleted", store.ErrLost, l.sd.Path, l.key, l.fence)
		}
	}
	if id, _, err := l.sd.Named(liveFile); err != nil || id != l.heldLive {
		return fmt.Errorf("%w: the lock file %s of %q (fence %d) was moved or deleted", store.ErrLost, l.sd.Join(liveFile), l.key, l.fence)
	}
	if id, _, err := l.kd.Named(guardFile); err != nil || id != l.guard.id {
		return l.guardGone(nil)
	}
	if id, _, err := l.sd.Named(leaseFile); err != nil || id != l.record.id {
		return l.recordGone(nil)
	}
	return nil
}

// recordGone is the error of a lease whose record is no longer the file
// it was taken under or last wrote whole (or cannot be looked at: err).
func (l *Lease) recordGone(err error) error {
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w: the lease record %s of %q (fence %d) was replaced or deleted", store.ErrLost, l.sd.Join(leaseFile), l.key, l.fence)
}

// watchPath pokes l.changes once the key's files are moved or deleted,
// until stop is closed; Check then says the lease is lost.
//
// A lease whose renewals come at least every pathCheckEvery (the keeper
// renews at a third of the TTL: a TTL of up to 3 s) is checked by each
// renewal (update) and needs no timer of its own: one wake-up a second
// less while holding, a fifth of a holder's idle CPU here (P4).
func (l *Lease) watchPath(stop <-chan struct{}) {
	if l.ttl/3 <= pathCheckEvery {
		return
	}
	t := time.NewTicker(pathCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		err := error(nil)
		if !l.released {
			err = l.stillThere()
		}
		l.mu.Unlock()
		if err != nil {
			select {
			case l.changes <- struct{}{}:
			default:
			}
			return
		}
	}
}
