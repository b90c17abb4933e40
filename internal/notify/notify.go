// Package notify is fencerun's one change notification: a process that
// must hear of a change at once listens on a unix datagram socket of its
// own in the directory of the state it watches, and records the socket's
// name in that state; whoever makes the change writes it first and then
// sends one byte there (Send). A key's holder hears of a revocation or a
// cancel request this way (store/filestore), a resident role's holder of a
// handover or cancel request, and a resident standby of a release or an
// answer (resident).
//
// Why datagram sockets: a change wakes exactly the process it is for. A
// watch on the state (inotify) wakes every watcher of a file at every
// change, so a thousand waiters on one key would all wake at each
// handoff, and tearing an inotify instance down waits for an RCU grace
// period (5 to 20 ms measured here) at every release and exit. A socket
// closes in microseconds, and a sender reaches one listener by its name.
//
// What it guarantees: a datagram only says "look"; the listener reads the
// state, so a stray or repeated datagram costs one read and nothing else.
// Sends to one listener coalesce (Listener.Notify). The socket is a file in
// the state's directory, not an abstract name: only those who may enter
// that directory reach it, from any network namespace sharing the file
// system. A name is the caller's prefix, "n-" and 32 hex digits (IsName),
// so a name read from a state file never makes anyone send elsewhere.
//
// What it does not guarantee: delivery. A listener that is gone is not
// reached, a full socket buffer drops the datagram (the listener has a
// look pending anyway), and a change made by hand, without a Send, is not
// announced: each user says when it looks again regardless.
package notify

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// infix comes between the caller's prefix and the random part of a name.
const infix = "n-"

// IsName reports whether name is a listener's name with prefix: the
// prefix, "n-" and 32 hex digits, nothing that could name another
// directory.
func IsName(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix+infix)
	if !ok || len(rest) != 32 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil && strings.ToLower(rest) == rest
}

// Listener is one process's socket.
type Listener struct {
	dirfd int // the directory's, kept open by the caller until Close
	name  string
	conn  *net.UnixConn
	done  chan struct{} // closed when Notify's goroutine ends
}

// Listen binds a new socket named prefix, "n-" and a random part in the
// directory open as dirfd (path dir, for messages and long paths), with
// the file mode mode.
func Listen(dirfd int, dir, prefix string, mode uint32) (*Listener, error) {
	var err error
	for range 5 {
		var b [16]byte
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		name := prefix + infix + hex.EncodeToString(b[:])
		var c *net.UnixConn
		c, err = unixsock.ListenPacket(dirfd, dir, name, mode)
		if err == nil {
			return &Listener{dirfd: dirfd, name: name, conn: c}, nil
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("notify: listen in %s: %w", dir, err)
}

// Name is the socket's name in its directory, to record in the state.
func (l *Listener) Name() string { return l.name }

// Notify delivers each datagram as a coalesced send on changes, until
// Close; a failure to read ends it, told to failed.
func (l *Listener) Notify(changes chan<- struct{}, failed func(error)) {
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		var buf [64]byte
		for {
			if _, _, err := l.conn.ReadFromUnix(buf[:]); err != nil {
				if !errors.Is(err, net.ErrClosed) {
					failed(err)
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

// Fd is the socket's descriptor, for a caller that sleeps in poll(2) on
// it beside other descriptors instead of using Notify; Drain then reads
// what woke it. It is valid until Close.
func (l *Listener) Fd() int {
	fd := -1
	if rc, err := l.conn.SyscallConn(); err == nil {
		rc.Control(func(s uintptr) { fd = int(s) })
	}
	return fd
}

// Drain reads every datagram waiting, without blocking.
func (l *Listener) Drain() {
	var buf [64]byte
	for {
		if n, _, err := unix.Recvfrom(l.Fd(), buf[:], unix.MSG_DONTWAIT); n < 0 || err != nil {
			return
		}
	}
}

// Close closes and removes the socket; Notify's goroutine, if any, ends
// with it.
func (l *Listener) Close() {
	l.conn.Close()
	unixsock.Remove(l.dirfd, l.name)
	if l.done != nil {
		<-l.done
	}
}

// sendWait bounds a send: a listener whose buffer is full has a look
// pending already.
const sendWait = 100 * time.Millisecond

// Send tells the listener named name with prefix in the directory open as
// dirfd (path dir) to look. A name that is not a listener's is not sent
// to.
func Send(dirfd int, dir, prefix, name string) error {
	if !IsName(name, prefix) {
		return fmt.Errorf("notify: %q is not a listener's name", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sendWait)
	defer cancel()
	c, err := unixsock.DialAt(ctx, "unixgram", dirfd, dir, name)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(sendWait))
	if _, err := c.Write([]byte{1}); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}
