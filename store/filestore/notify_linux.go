package filestore

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A holder learns of a revocation or a cancel request at once through a
// datagram: it listens on an abstract unix socket whose name is in its
// record, and Revoke and Cancel send one byte there after their write. The
// datagram only says "look": the holder's Check reads the record, so a
// stray or forged datagram costs one read and nothing else.
//
// Why not inotify on the key directory: tearing an inotify instance down
// waits for the kernel's fsnotify reaper and an SRCU grace period, 5 to
// 20 ms measured here, on every release and at process exit, which alone
// would cost fencerun more than flock(1) takes for a whole run (SPEC P1).
// A socket closes in microseconds.
//
// What it does not reach: a writer in another network namespace (abstract
// socket names are per namespace), and hand edits of the state files. The
// holder sees those at its next renewal.

const notifyPrefix = "fencerun/lease/"

// notifier is a holder's socket and the goroutine that turns datagrams
// into sends on the lease's Changes channel.
type notifier struct {
	name string // without the leading NUL byte
	conn *net.UnixConn
	done chan struct{}
}

func listenNotify() (*notifier, error) {
	var err error
	for range 5 {
		var b [16]byte
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		name := notifyPrefix + hex.EncodeToString(b[:])
		var c *net.UnixConn
		c, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "@" + name, Net: "unixgram"})
		if err == nil {
			return &notifier{name: name, conn: c, done: make(chan struct{})}, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
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

// stop closes the socket; start's goroutine, if any, ends with it.
func (n *notifier) stop(started bool) {
	n.conn.Close()
	if started {
		<-n.done
	}
}

// poke tells the holder listening on name to look at its record. It is
// best effort: a holder that is gone, or in another network namespace,
// is not reached, and that is reported only to the debug log.
func poke(name string, log hclog.Logger) {
	if !strings.HasPrefix(name, notifyPrefix) || !isHex(name[len(notifyPrefix):], 32) {
		return // not one of ours: never send anywhere a record merely says
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: "@" + name, Net: "unixgram"})
	if err == nil {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, err = c.Write([]byte{1})
		c.Close()
	}
	if err != nil {
		log.Debug("could not tell the holder to look at its record", "error", err)
	}
}
