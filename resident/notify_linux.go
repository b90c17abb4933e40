package resident

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/notify"
	"github.com/fencerun/fencerun/internal/unixsock"
)

// Changes reach the role's processes through internal/notify, as they
// reach a key's holder: each listens on a datagram socket of its own
// beside the lock file, named <store>.resident.n-<hex>, and whoever makes
// a change writes it first and then sends there. The holder's name is in
// the payload: a handover request (ask) and a cancel request (Cancel) are
// sent to it. A newcomer's name is in its request and a standby's in its
// standby file: the holder sends to the newcomer when it refuses it or
// releases after accepting it, and to every standby when it releases.
// Nothing else wakes them but their own timeouts and the holder's exit
// (a pidfd): a standby behind a live holder on this host sleeps until
// one of them. Changes made by hand (a lock file moved or deleted) are
// seen by the holder within a second (moved_linux.go), and its exit then
// wakes the standbys.

// notifyPrefix starts the name of a socket of the role of p.
func notifyPrefix(p paths) string { return filepath.Base(p.store) + ".resident." }

// listenBeside makes a socket beside the lock file of p; the caller
// closes both the listener and the directory.
func listenBeside(p paths) (*notify.Listener, func(), error) {
	d, _, err := openIn(p.lock, false)
	if err != nil {
		return nil, nil, fmt.Errorf("resident: %w", err)
	}
	l, err := notify.Listen(d.FD, d.Path, notifyPrefix(p), d.FileMode())
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("resident: %w", err)
	}
	return l, func() { l.Close(); d.Close() }, nil
}

// poke tells the process listening on name beside the lock file of p to
// look. It is best effort: one that is gone is not reached, and that is
// only logged at debug.
func poke(p paths, name string, log hclog.Logger) {
	if name == "" {
		return
	}
	d, _, err := openIn(p.lock, false)
	if err == nil {
		err = notify.Send(d.FD, d.Path, notifyPrefix(p), name)
		d.Close()
	}
	if err != nil && log != nil {
		log.Debug("could not tell a process of the role to look", "error", err)
	}
}

// waiter sleeps until the role may have become free or the holder's
// payload changed: poll(2) on its own socket (the holder's release or
// answer), a pidfd of the holder (it exited, so its lock is gone), and an
// eventfd written when ctx ends.
type waiter struct {
	ctx   context.Context
	sock  *notify.Listener
	close func() // closes sock and its directory
	efd   int
	pidfd int
	pid   int          // followed by pidfd
	gone  map[int]bool // pids whose pidfd fired: never follow them again
	mu    sync.Mutex
	shut  bool
	stop  func() bool
}

func newWaiter(ctx context.Context, p paths) (*waiter, error) {
	sock, closeSock, err := listenBeside(p)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		closeSock()
		return nil, fmt.Errorf("resident: eventfd: %w", err)
	}
	w := &waiter{ctx: ctx, sock: sock, close: closeSock, efd: efd, pidfd: -1, gone: map[int]bool{}}
	w.stop = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.shut {
			unix.Write(w.efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}
	})
	return w, nil
}

// name is the waiter's socket, to record where the holder reads it.
func (w *waiter) name() string { return w.sock.Name() }

// follow wakes the waiter when pid exits, if pid is on this host. Following
// another pid drops the previous one. It returns false when pid turns out
// to be gone already: its lock is gone too, and no event may be left to
// say so.
func (w *waiter) follow(pid int, host string) bool {
	if pid == w.pid || pid <= 0 || host != hostname() || w.gone[pid] {
		return true
	}
	w.unfollow()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		w.gone[pid] = true
		return false
	}
	if err != nil {
		return true // no pidfd here: the socket and the timeout remain
	}
	w.pidfd, w.pid = fd, pid
	return true
}

// following reports whether the holder's exit will wake the waiter.
func (w *waiter) following() bool { return w.pidfd >= 0 }

func (w *waiter) unfollow() {
	if w.pidfd >= 0 {
		unix.Close(w.pidfd)
	}
	w.pidfd, w.pid = -1, 0
}

// wait returns after an event, after d (never, when d is negative), or
// with ctx's cause once ctx ends.
func (w *waiter) wait(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if w.ctx.Err() != nil {
			return context.Cause(w.ctx)
		}
		fds := []unix.PollFd{{Fd: int32(w.sock.Fd()), Events: unix.POLLIN}, {Fd: int32(w.efd), Events: unix.POLLIN}}
		if w.pidfd >= 0 {
			fds = append(fds, unix.PollFd{Fd: int32(w.pidfd), Events: unix.POLLIN})
		}
		ms := -1
		if d >= 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return nil
			}
			ms = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resident: poll: %w", err)
		}
		if n == 0 {
			return nil
		}
		if fds[0].Revents != 0 {
			w.sock.Drain()
		}
		if len(fds) > 2 && fds[2].Revents != 0 {
			w.gone[w.pid] = true
			w.unfollow()
		}
		if w.ctx.Err() != nil {
			return context.Cause(w.ctx)
		}
		return nil
	}
}

func (w *waiter) shutdown() {
	w.stop()
	w.mu.Lock()
	w.shut = true
	w.mu.Unlock()
	w.unfollow()
	unix.Close(w.efd)
	w.close()
}

// removeSocket removes a dead holder's socket named in its payload.
func removeSocket(p paths, name string) {
	if !notify.IsName(name, notifyPrefix(p)) {
		return
	}
	d, _, err := openIn(p.lock, false)
	if err != nil {
		return
	}
	defer d.Close()
	unixsock.Remove(d.FD, name)
}
