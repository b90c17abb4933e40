package resident

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// Moved and unlinked lock files (S9). The kernel lock proves a holder alive
// only while the lock path names the file it locked: deleted or renamed
// (a cleanup script, the worker itself), a newcomer would create and lock a
// fresh one and start beside it. So:
//
//   - the holder notices within a second: a check every second that the
//     path, resolved afresh, names its inode (the file or an ancestor was
//     moved or deleted), after which Renew and Check return store.ErrLost
//     (exit 76); its exit then wakes the standbys (pidfd);
//   - from acquisition until its release (after its command's tree is
//     gone) a holder holds an abstract socket name derived from the store's
//     real path (unixsock.Claim), which nothing can unlink; a newcomer that
//     won the kernel lock still needs that name, and while a holder of the
//     same user (or root) holds it, waits, or is refused as held.
//
// A store is its file, not one of its names: where the store file exists,
// the holder also holds a name derived from its device and inode, so a
// newcomer through a hard link (or any other path to the file) is refused
// as held, or waits, as flock(1) on either name would (issue 26).
//
// As for keys: abstract names are per network namespace, and a name held
// by another user is ignored, never waited for. A holder that took its
// role before the worker made the store file holds no name of the file:
// a hard link made after that is a second role until the holder's next
// acquisition.

// pathCheckEvery is how often a holder checks that its lock path still
// names the file it holds locked.
const pathCheckEvery = time.Second

func claimName(p paths) string {
	sum := sha256.Sum256([]byte(p.store))
	return "fencerun/resident/" + hex.EncodeToString(sum[:16])
}

// roleClaims are the abstract names a holder holds until its release:
// its store path's, and its store file's (by device and inode) when the
// file exists, so that a hard link to it, or any other name of the file,
// is the same store as flock(1) users expect (issue 26).
type roleClaims [2]*unixsock.Claim

// Release gives both names up.
func (cs roleClaims) Release() { cs[0].Release(); cs[1].Release() }

// inodeClaimName is the claim name of the store file's device and inode,
// or "" where there is no regular file at the store path (a role holds
// its store before the worker makes it, R1).
func inodeClaimName(p paths) string {
	var st unix.Stat_t
	if unix.Stat(p.store, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ""
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d:%d", st.Dev, st.Ino)))
	return "fencerun/resident-file/" + hex.EncodeToString(sum[:16])
}

// takeClaim takes the role's claims (roleClaims). busy, when not "", says
// why it cannot: a live holder of this user or root holds one.
func takeClaim(p paths, log hclog.Logger) (cs roleClaims, busy string, err error) {
	var held bool
	if cs[0], held, err = takeOne(claimName(p), log); err != nil || held {
		return cs, "a holder whose lock file was moved or deleted is still stopping its command", err
	}
	if name := inodeClaimName(p); name != "" {
		if cs[1], held, err = takeOne(name, log); err != nil || held {
			cs.Release()
			return roleClaims{}, "the role is held through another name of the store file (a hard link)", err
		}
	}
	return cs, "", nil
}

// takeOne takes the claim name. held reports one held by a live holder of
// this user or root; one held by another user is ignored (nil, false).
func takeOne(name string, log hclog.Logger) (c *unixsock.Claim, held bool, err error) {
	c, uid, err := unixsock.TakeClaim(name)
	if err != nil || c != nil {
		return c, false, err
	}
	if uid >= 0 && (uid == os.Geteuid() || uid == 0) {
		return nil, true, nil
	}
	log.Warn("the holder claim of this store is held by another user; ignoring it", "uid", uid)
	return nil, false, nil
}

// watchPath pokes the role's changes once the lock path no longer names
// the file it holds, until the release; Check then says the role is lost.
func (r *Role) watchPath() {
	t := time.NewTicker(pathCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-r.unwatch:
			return
		case <-t.C:
		}
		if err := r.verify(); err != nil {
			select {
			case r.changes <- struct{}{}:
			default:
			}
			return
		}
	}
}
