package supervisor

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/logfield"
)

// A pid namespace without a /proc of its own (unshare --pid --fork without
// --mount-proc, some container runtimes): the /proc this process sees
// belongs to another namespace, and every pid in it names a different
// process here, or none. The tree is then never read from /proc:
//
//   - as the namespace's init (pid 1), every process of the namespace is
//     this process's descendant and is reparented to it: the tree is the
//     whole namespace. Signals go to all of it (kill(-1)), it is reaped by
//     wait4(-1), and it is gone when no child is left (ECHILD);
//   - otherwise only the command's process group is signalled, and the
//     tree is gone when this process has no child left; a process that
//     left the group is not found (a cgroup, if there is one, still kills
//     it), and one that outlives the SIGKILL of the group is given up on
//     after foreignGiveUp, with an error.
//
// Neither records a process group or session for the next holder: their
// ids mean nothing outside this namespace.

// foreignGiveUp is how long a sweep without /proc, not as the namespace's
// init, waits after SIGKILL for children that left the group.
const foreignGiveUp = time.Second

var procNS struct {
	once    sync.Once
	foreign bool
}

// foreignProc reports whether the /proc this process sees is another pid
// namespace's: /proc/self there names another pid than this one's.
func foreignProc() bool {
	procNS.once.Do(func() {
		s, err := os.Readlink("/proc/self")
		n, _ := strconv.Atoi(s)
		procNS.foreign = err != nil || n != os.Getpid()
	})
	return procNS.foreign
}

// nsInit reports whether this process is its pid namespace's init.
func nsInit() bool { return os.Getpid() == 1 }

// waitAll reaps every child as it ends, until none is left, recording the
// direct child's status: the tree's end without /proc. It returns the
// direct child's wait status.
func (p *Process) waitAll(pid int) (syscall.WaitStatus, error) {
	var (
		status syscall.WaitStatus
		found  bool
	)
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.ECHILD:
			if !found {
				return status, fmt.Errorf("supervisor: pid %d was reaped by someone else", pid)
			}
			return status, nil
		case err != nil:
			return status, err
		case wpid == pid:
			status, found = ws, true
			close(p.exited)
		}
	}
}

// signalForeign signals the tree without /proc: the namespace as init,
// else the process group (none for a dead holder's leftovers).
func (s *sweep) signalForeign(sig syscall.Signal) {
	if s.group == 0 {
		return
	}
	target := -s.group
	if nsInit() {
		target = -1
	}
	if err := unix.Kill(target, sig); err != nil && err != unix.ESRCH {
		s.log.Warn("cannot signal the tree", "target", target, "signal", logfield.Signal(sig), "error", err)
	}
}

// runForeign is the sweep without /proc and without a cgroup: the stop
// signal and SIGCONT, SIGKILL at the deadline, until gone is closed.
func (s *sweep) runForeign(timer boottime.Timer) error {
	goneNow := func() bool {
		select {
		case <-s.gone:
			return true
		default:
			return false
		}
	}
	if goneNow() {
		return nil
	}
	bridged := make(chan struct{})
	stop := make(chan struct{})
	defer func() { close(stop); <-bridged }()
	go func() {
		defer close(bridged)
		select {
		case <-s.gone:
			wakeUp(s.wake)
		case <-stop:
		}
	}()
	s.signalForeign(s.sig)
	s.signalForeign(syscall.SIGCONT)
	var killedAt time.Duration
	for {
		if err := s.cancelled(); err != nil {
			return err
		}
		if goneNow() {
			return nil
		}
		now := s.clock.Now()
		switch {
		case killedAt == 0 && now >= s.deadline():
			killedAt = now
			s.log.Warn("grace is over, killing what is left")
			s.signalForeign(syscall.SIGKILL)
		case killedAt != 0 && !nsInit() && now >= killedAt+foreignGiveUp:
			return fmt.Errorf("supervisor: processes that left the command's group outlived SIGKILL of the group; without a /proc of this pid namespace they cannot be found")
		}
		if killedAt == 0 {
			timer.Set(s.deadline())
		} else if !nsInit() {
			timer.Set(killedAt + foreignGiveUp)
		}
		fds := []unix.PollFd{{Fd: int32(s.wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return fmt.Errorf("supervisor: poll: %w", err)
		}
		drain(s.wake)
	}
}
