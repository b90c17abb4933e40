package filestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Inotify masks. A waiter wakes when the lease record is replaced (a
// release, a revocation, a takeover), when an entry leaves the queue, or
// when the directories go away. A holder wakes when its record or the
// cancel file changes.
const (
	waitKeyMask = unix.IN_MOVED_TO | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	queueMask   = unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	holderMask  = unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
)

// addWatch watches the directory d is open on, through its descriptor's
// /proc link so the watch lands on the directory we checked, not on
// whatever its path names by now.
func addWatch(in int, d dir, mask uint32) error {
	_, err := unix.InotifyAddWatch(in, "/proc/self/fd/"+strconv.Itoa(d.fd), mask)
	if err == unix.ENOENT { // no /proc: the path, without following a symlink
		_, err = unix.InotifyAddWatch(in, d.path, mask|unix.IN_DONT_FOLLOW|unix.IN_ONLYDIR)
	}
	if err != nil {
		return fmt.Errorf("filestore: watch %s: %w", d.path, err)
	}
	return nil
}

// drain reads whatever events are queued on the non-blocking inotify
// descriptor in, and reports whether any of them matter to a holder.
func drain(in int) bool {
	var buf [4096]byte
	relevant := false
	for {
		n, err := unix.Read(in, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return relevant
		}
		relevant = relevant || holderEvent(buf[:n])
	}
}

// holderEvent reports whether a buffer of inotify events holds one that
// may change what the holder's Check answers.
func holderEvent(buf []byte) bool {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return true // torn buffer: assume the worst
		}
		if ev.Mask&(unix.IN_Q_OVERFLOW|unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			return true
		}
		name := buf[unix.SizeofInotifyEvent:end]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		if string(name) == leaseFile || string(name) == cancelFile {
			return true
		}
		buf = buf[end:]
	}
	return false
}

// newHolderWatch makes the inotify descriptor of a holder's Changes.
func newHolderWatch(kd dir) (int, error) {
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("filestore: inotify for %s: %w", kd.path, err)
	}
	if err := addWatch(in, kd, holderMask); err != nil {
		unix.Close(in)
		return -1, err
	}
	return in, nil
}

// holderWatch delivers a holder's Changes: a goroutine blocked in the
// runtime's poller on the inotify descriptor, until stop.
type holderWatch struct {
	f    *os.File
	done chan struct{}
}

// startHolderWatch drops the events queued so far (the holder's own
// writes) and then sends on changes, coalesced, for every relevant event.
func startHolderWatch(in int, changes chan struct{}, log hclog.Logger) *holderWatch {
	drain(in)
	w := &holderWatch{f: os.NewFile(uintptr(in), "inotify"), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		buf := make([]byte, 4096)
		for {
			n, err := w.f.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					log.Error("watching the lease stopped; changes will be seen at the next renewal", "error", err)
				}
				return
			}
			if holderEvent(buf[:n]) {
				select {
				case changes <- struct{}{}:
				default:
				}
			}
		}
	}()
	return w
}

func (w *holderWatch) stop() {
	w.f.Close()
	<-w.done
}

// waiter is where a queued Acquire sleeps: poll(2) on inotify (the key
// directory and its queue), a pidfd of the process it waits behind, and an
// eventfd written when its context ends.
type waiter struct {
	in     int
	stopAF func() bool

	mu sync.Mutex // guards ev against the AfterFunc
	ev int

	misses int // pids found gone in a row, for the back-off
}

func newWaiter(ctx context.Context, kd dir) (*waiter, error) {
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("filestore: inotify for %s: %w", kd.path, err)
	}
	if err := addWatch(in, kd, waitKeyMask); err != nil {
		unix.Close(in)
		return nil, err
	}
	ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(in)
		return nil, fmt.Errorf("filestore: eventfd: %w", err)
	}
	w := &waiter{in: in, ev: ev}
	w.stopAF = context.AfterFunc(ctx, w.wake)
	return w, nil
}

func (w *waiter) watch(d dir, mask uint32) error { return addWatch(w.in, d, mask) }

func (w *waiter) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ev >= 0 {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		unix.Write(w.ev, one[:])
	}
}

func (w *waiter) close() {
	w.stopAF()
	w.mu.Lock()
	unix.Close(w.ev)
	w.ev = -1
	w.mu.Unlock()
	unix.Close(w.in)
}

// sleep returns when something may have changed: an inotify event, the
// death of pid (0: none to watch), the context's end, or the safety
// timeout.
func (w *waiter) sleep(pid int) {
	timeout := safetyTimeout
	fds := []unix.PollFd{
		{Fd: int32(w.in), Events: unix.POLLIN},
		{Fd: int32(w.ev), Events: unix.POLLIN},
	}
	if pid > 0 && pid != os.Getpid() {
		pfd, err := unix.PidfdOpen(pid, 0)
		switch err {
		case nil:
			defer unix.Close(pfd)
			fds = append(fds, unix.PollFd{Fd: int32(pfd), Events: unix.POLLIN})
			w.misses = 0
		case unix.ESRCH:
			// Gone already. Look again at once; if its lock is still held
			// (by a process that is not the one recorded, as a pid from
			// another pid namespace), back off towards the safety timeout.
			timeout = 0
			if w.misses > 0 {
				timeout = min(safetyTimeout, 10*time.Millisecond<<min(w.misses-1, 10))
			}
			w.misses++
		}
	}
	for {
		_, err := unix.Poll(fds, int(timeout.Milliseconds()))
		if err != unix.EINTR {
			break
		}
	}
	drain(w.in)
}
