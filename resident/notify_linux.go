package resident

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdPath names the inode open as fd, so that a watch lands on the inode we
// hold and not on whatever the path names by then.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// roleWatch tells a holder (the Role's answer, which passes it on to
// Changes) when something may have changed for it: a handover or cancel
// request arrived (renamed into the directory), or its lock file was
// unlinked, renamed or replaced. It watches the directory only for
// renames into it and the lock file's inode for link changes, so a command
// busy writing its store beside the lock file does not wake it.
type roleWatch struct {
	f    *os.File // inotify, read through Go's poller so Close ends the reader
	done chan struct{}
}

func watchRole(p paths, lockFd int, events chan<- struct{}) (*roleWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("resident: inotify: %w", err)
	}
	dirWd, err := unix.InotifyAddWatch(fd, p.dir, unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "watch", Path: p.dir, Err: err}
	}
	if _, err := unix.InotifyAddWatch(fd, fdPath(lockFd), unix.IN_ATTRIB|unix.IN_MOVE_SELF|unix.IN_DELETE_SELF); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "watch", Path: p.lock, Err: err}
	}
	w := &roleWatch{f: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{})}
	lockName, handoverName, cancelName := baseName(p.lock), baseName(p.handover), baseName(p.cancel)
	go func() {
		defer close(w.done)
		buf := make([]byte, 64*1024)
		for {
			n, err := w.f.Read(buf)
			if err != nil {
				return // closed
			}
			relevant := false
			eachEvent(buf[:n], func(wd int, mask uint32, name string) {
				if wd != dirWd || mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 ||
					name == lockName || name == handoverName || name == cancelName {
					relevant = true
				}
			})
			if relevant {
				select {
				case events <- struct{}{}:
				default:
				}
			}
		}
	}()
	return w, nil
}

func (w *roleWatch) close() {
	w.f.Close()
	<-w.done
}

// eachEvent calls fn for each inotify event in buf. An overflow (wd -1)
// comes through with an empty name and so counts as relevant to anyone.
func eachEvent(buf []byte, fn func(wd int, mask uint32, name string)) {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return
		}
		name := string(buf[unix.SizeofInotifyEvent:end])
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		fn(int(ev.Wd), ev.Mask, name)
		buf = buf[end:]
	}
}

func baseName(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[i+1:]
		}
	}
	return path
}

// waiter sleeps until the role may have become free or the holder's payload
// changed: poll(2) on inotify of the lock file's inode (payload writes, any
// close, link changes), a pidfd of the holder (it exited, so its lock is
// gone), and an eventfd written when ctx ends.
type waiter struct {
	ctx   context.Context
	ino   int
	efd   int
	pidfd int
	pid   int          // followed by pidfd
	gone  map[int]bool // pids whose pidfd fired: never follow them again
	mu    sync.Mutex
	shut  bool
	stop  func() bool
}

func newWaiter(ctx context.Context) (*waiter, error) {
	ino, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("resident: inotify: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ino)
		return nil, fmt.Errorf("resident: eventfd: %w", err)
	}
	w := &waiter{ctx: ctx, ino: ino, efd: efd, pidfd: -1, gone: map[int]bool{}}
	w.stop = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.shut {
			unix.Write(w.efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}
	})
	return w, nil
}

// watch follows the inode open as lockFd (again after a reopen).
func (w *waiter) watch(lockFd int, path string) error {
	const mask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CLOSE_NOWRITE |
		unix.IN_ATTRIB | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF
	if _, err := unix.InotifyAddWatch(w.ino, fdPath(lockFd), mask); err != nil {
		return &os.PathError{Op: "watch", Path: path, Err: err}
	}
	return nil
}

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
		return true // no pidfd here: inotify and the safety net remain
	}
	w.pidfd, w.pid = fd, pid
	return true
}

func (w *waiter) unfollow() {
	if w.pidfd >= 0 {
		unix.Close(w.pidfd)
	}
	w.pidfd, w.pid = -1, 0
}

// wait returns after an event, after d, or with ctx's cause once ctx ends.
func (w *waiter) wait(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if w.ctx.Err() != nil {
			return context.Cause(w.ctx)
		}
		fds := []unix.PollFd{{Fd: int32(w.ino), Events: unix.POLLIN}, {Fd: int32(w.efd), Events: unix.POLLIN}}
		if w.pidfd >= 0 {
			fds = append(fds, unix.PollFd{Fd: int32(w.pidfd), Events: unix.POLLIN})
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		ms := int((left + time.Millisecond - 1) / time.Millisecond)
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
			w.drain()
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

func (w *waiter) drain() {
	buf := make([]byte, 16*1024)
	for {
		if n, err := unix.Read(w.ino, buf); n <= 0 || err != nil {
			return
		}
	}
}

func (w *waiter) close() {
	w.stop()
	w.mu.Lock()
	w.shut = true
	w.mu.Unlock()
	w.unfollow()
	unix.Close(w.efd)
	// Closing an inotify instance waits for an RCU grace period
	// (milliseconds); the caller is about to start its command.
	go unix.Close(w.ino)
}
