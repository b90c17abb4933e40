package resident

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// Moved and unlinked lock files (S9). The kernel lock proves a holder alive
// only while the lock path names the file it locked: deleted or renamed
// (a cleanup script, the worker itself), a newcomer would create and lock a
// fresh one and start beside it. So:
//
//   - the holder notices within a second: inotify on the lock file's inode
//     and the directory, and a check every second that the path, resolved
//     afresh, names its inode (an ancestor moved), after which Renew and
//     Check return store.ErrLost (exit 76);
//   - from acquisition until its release (after its command's tree is
//     gone) a holder holds an abstract socket name derived from the store's
//     real path (unixsock.Claim), which nothing can unlink; a newcomer that
//     won the kernel lock still needs that name, and while a holder of the
//     same user (or root) holds it, waits, or is refused as held.
//
// As for keys: abstract names are per network namespace, and a name held
// by another user is ignored, never waited for.

// pathCheckEvery is how often a holder checks that its lock path still
// names the file it holds locked.
const pathCheckEvery = time.Second

func claimName(p paths) string {
	sum := sha256.Sum256([]byte(p.store))
	return "fencerun/resident/" + hex.EncodeToString(sum[:16])
}

// takeClaim takes the role's claim. moved reports one held by a live
// holder of this user or root.
func takeClaim(p paths, log hclog.Logger) (c *unixsock.Claim, moved bool, err error) {
	c, uid, err := unixsock.TakeClaim(claimName(p))
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
