package filestore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// A holder learns of a revocation or a cancel request at once through a
// datagram: it listens on a unix datagram socket in its key's directory,
// whose name is in its record, and Revoke and Cancel send one byte there
// after their write. The datagram only says "look": the holder's Check
// reads the record, so a stray datagram costs one read and nothing else.
//
// The socket is a file in the key directory, not an abstract name: only
// the store's users can enter that directory (0700, or 2770 in a group
// store), so nobody else can reach the socket, let alone fill it, and it is
// reached from any network namespace that shares the file system (a
// container or a PrivateNetwork= unit sharing the state directory). Its
// name is relative to the key directory, so a record never makes anyone
// send anywhere else. A long key directory path is reached through
// /proc/self/fd (package unixsock).
//
// Why not inotify on the key directory: tearing an inotify instance down
// waits for the kernel's fsnotify reaper and an SRCU grace period, 5 to
// 20 ms measured here, on every release and at process exit, which alone
// would cost fencerun more than flock(1) takes for a whole run (P1).
// A socket closes in microseconds.
//
// What it does not reach: hand edits of the state files (the holder sees
// those at its next renewal, or within a second if they move its key
// directory: see Lease.watchPath).

// notifyPrefix starts the name of a holder's socket in its key directory.
const notifyPrefix = "n-"

// isNotifyName reports whether name is a holder socket's name: the prefix
// and 32 hex digits, nothing that could name another directory.
func isNotifyName(name string) bool {
	return strings.HasPrefix(name, notifyPrefix) && isHex(name[len(notifyPrefix):], 32)
}

// notifier is a holder's socket and the goroutine that turns datagrams
// into sends on the lease's Changes channel.
type notifier struct {
	kd   dir // the key directory; the Lease closes it after stop
	name string
	conn *net.UnixConn
	done chan struct{}
}

func listenNotify(kd dir, mode uint32) (*notifier, error) {
	var err error
	for range 5 {
		var b [16]byte
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		name := notifyPrefix + hex.EncodeToString(b[:])
		var c *net.UnixConn
		c, err = unixsock.ListenPacket(kd.FD, kd.Path, name, mode)
		if err == nil {
			return &notifier{kd: kd, name: name, conn: c, done: make(chan struct{})}, nil
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("filestore: listen for lease changes: %w", err)
}

// start delivers each datagram as a coalesced send on changes, until stop.
func (n *notifier) start(changes chan struct{}, log hclog.Logger) {
	go func() {
		defer close(n.done)
		var buf [64]byte
		for {
			if _, _, err := n.conn.ReadFromUnix(buf[:]); err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Error("listening for lease changes stopped; they will be seen at the next renewal", "error", err)
				}
				return
			}
			select {
			case changes <- struct{}{}:
			default:
			}
		}
	}()
}

// stop closes and removes the socket; start's goroutine, if any, ends with
// it.
func (n *notifier) stop(started bool) {
	n.conn.Close()
	unixsock.Remove(n.kd.FD, n.name)
	if started {
		<-n.done
	}
}

// poke tells the holder listening on name in the key directory kd to look
// at its record. It is best effort: a holder that is gone is not reached,
// and that is reported only to the debug log.
func poke(kd dir, name string, log hclog.Logger) {
	if !isNotifyName(name) {
		return // not one of ours (or an older fencerun's abstract name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c, err := unixsock.DialAt(ctx, "unixgram", kd.FD, kd.Path, name)
	if err == nil {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, err = c.Write([]byte{1})
		c.Close()
	}
	if err != nil {
		log.Debug("could not tell the holder to look at its record", "error", err)
	}
}
