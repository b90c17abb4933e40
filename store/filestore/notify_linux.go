package filestore

import (
	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/internal/notify"
)

// A holder learns of a revocation or a cancel request at once through
// internal/notify: it listens on a datagram socket in its key's directory,
// whose name ("n-" and 32 hex digits) is in its record, and Revoke and
// Cancel send one there after their write. The holder's Check then reads
// the record. Only the store's users can enter the key directory (0700,
// or 2770 in a group store), so nobody else can reach the socket.
//
// What it does not reach: hand edits of the state files (the holder sees
// those at its next renewal, or within a second if they move its key
// directory: see Lease.watchPath).

// notifyPrefix starts a holder socket's name in its key directory, before
// notify's own "n-".
const notifyPrefix = ""

// isNotifyName reports whether name is a holder socket's name.
func isNotifyName(name string) bool { return notify.IsName(name, notifyPrefix) }

func listenNotify(kd dir, mode uint32) (*notify.Listener, error) {
	return notify.Listen(kd.FD, kd.Path, notifyPrefix, mode)
}

// poke tells the holder listening on name in the key directory kd to look
// at its record. It is best effort: a holder that is gone is not reached,
// and that is reported only to the debug log.
func poke(kd dir, name string, log hclog.Logger) {
	if !isNotifyName(name) {
		return // not one of ours (or an older fencerun's abstract name)
	}
	if err := notify.Send(kd.FD, kd.Path, notifyPrefix, name); err != nil {
		log.Debug("could not tell the holder to look at its record", "error", err)
	}
}
