package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/logfield"
)

// untrackedRescan is how often a sweep re-reads the tree when some process
// of it could not be watched through a pidfd (out of descriptors).
const untrackedRescan = 50 * time.Millisecond

// freezeTries bounds the readings of one freeze (see sweep).
const freezeTries = 1000

// sweep stops a tree: the stop signal and SIGCONT to the processes there
// at the start, then, at the deadline, SIGKILL to all of it, until it is
// gone. The deadline is on clock (CLOCK_BOOTTIME: a suspend counts).
//
// With a cgroup, the tree is the cgroup: SIGKILL is cgroup.kill (atomic
// against forks) and the tree is gone when cgroup.events says so; the
// sweep sleeps in poll(2) on it and on pidfds of its members.
//
// Without one, the tree is what members reads afresh. The sweep waits in
// poll(2) on a pidfd of each process it knows, and re-reads the set when
// all of those are gone, or at the deadline: processes forked meanwhile
// (a trap's cleanup) are not signalled before the deadline, and must be
// gone before the sweep ends. At the deadline it freezes the tree before
// killing it (SIGSTOP to every member, re-read until every member read is
// stopped), so that a process forking in a loop cannot outrun it; and it
// declares the tree gone only when two readings in a row find nothing and
// no process was reparented to this one in between (see settled).
type sweep struct {
	log      hclog.Logger
	sig      syscall.Signal
	group    int                    // a process group signalled as a whole, or 0
	members  func() ([]proc, error) // the live processes to stop (no cgroup)
	kids     func() []int           // this process's children, to see orphans in transit; nil: none come here
	cg       *cgroup                // the tree's cgroup, or nil
	deadline func() time.Duration   // when SIGKILL is due, on clock
	clock    boottime.Clock
	wake     int             // eventfd: the deadline moved, or ctx ended
	ctx      context.Context // nil: never cancelled
	// foreign: /proc is another pid namespace's (see pidns_linux.go); the
	// tree is signalled as a whole and, without a cgroup, is gone when
	// gone is closed.
	foreign bool
	gone    <-chan struct{}
}

type procKey struct {
	pid   int
	start uint64
}

func (s *sweep) run() error {
	events := -1
	if s.cg != nil {
		// cgroup.events is watched through poll(2) on the file itself
		// (kernfs wakes it with POLLPRI on a change), not inotify, whose
		// close waits for an SRCU grace period (milliseconds on every
		// stop). Read before the timer is made: a command that exited
		// with its tree leaves the cgroup empty, and then the sweep is
		// over without one (a timerfd, two goroutines: P2).
		var err error
		events, err = s.cg.openEvents()
		if errors.Is(err, fs.ErrNotExist) {
			// Removed since it was opened (by another stopper of a dead
			// holder's tree), which only an empty cgroup can be.
			return nil
		}
		if err != nil {
			return err
		}
		defer unix.Close(events)
		if pop, err := readPopulated(events, s.cg.path); err != nil || !pop {
			return err
		}
	}
	// The grace's timer writes to wake, so poll(2) returns at the deadline
	// on the injected clock rather than on poll's own monotonic clock.
	timer, err := s.clock.NewTimer()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	bridged := make(chan struct{})
	go func() {
		defer close(bridged)
		for {
			select {
			case <-timer.C():
				wakeUp(s.wake)
			case <-done:
				return
			}
		}
	}()
	defer func() {
		close(done)
		<-bridged
		timer.Close()
	}()
	switch {
	case s.cg != nil:
		return s.runCgroup(timer, events)
	case s.foreign:
		return s.runForeign(timer)
	}
	return s.runProcs(timer)
}

func (s *sweep) cancelled() error {
	if s.ctx != nil && s.ctx.Err() != nil {
		return context.Cause(s.ctx)
	}
	return nil
}

// runCgroup sweeps a cgroup found populated through events, its
// cgroup.events.
func (s *sweep) runCgroup(timer boottime.Timer, events int) error {
	// The kernel rate-limits cgroup.events notifications (10 ms apart):
	// pidfds of the members there at the start wake the sweep at once
	// when they end, and cgroup.events is read again then.
	members := s.cg.track(maxTracked)
	defer func() {
		for _, m := range members {
			unix.Close(m.fd)
		}
	}()
	s.log.Debug("sending the stop signal", "signal", logfield.Signal(s.sig), "cgroup", s.cg.path)
	for _, sig := range []syscall.Signal{s.sig, syscall.SIGCONT} {
		if s.foreign {
			s.signalForeign(sig)
			continue
		}
		if s.group != 0 {
			if err := unix.Kill(-s.group, sig); err != nil && err != unix.ESRCH {
				s.log.Warn("cannot signal the process group", "pgid", s.group, "signal", logfield.Signal(sig), "error", err)
			}
		}
		for _, m := range members {
			if s.group != 0 && m.pgid == s.group {
				continue
			}
			if err := sendSignal(m.fd, sig); err != nil {
				s.log.Warn("cannot signal a process of the cgroup", "pid", m.pid, "signal", logfield.Signal(sig), "error", err)
			}
		}
	}
	killed := false
	for {
		if err := s.cancelled(); err != nil {
			return err
		}
		pop, err := readPopulated(events, s.cg.path)
		if err != nil {
			return err
		}
		if !pop {
			return nil
		}
		if !killed && s.clock.Now() >= s.deadline() {
			killed = true
			s.log.Warn("grace is over, killing what is left", "cgroup", s.cg.path)
			if err := s.cg.kill(); err != nil {
				return s.cg.cannotStop(err)
			}
		}
		if !killed {
			timer.Set(s.deadline())
		}
		fds := []unix.PollFd{{Fd: int32(s.wake), Events: unix.POLLIN}, {Fd: int32(events), Events: unix.POLLPRI}}
		for _, m := range members {
			fds = append(fds, unix.PollFd{Fd: int32(m.fd), Events: unix.POLLIN})
		}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return fmt.Errorf("supervisor: poll: %w", err)
		}
		drain(s.wake)
		kept := members[:0]
		for i, m := range members {
			if fds[i+2].Revents != 0 {
				unix.Close(m.fd)
				continue
			}
			kept = append(kept, m)
		}
		members = kept
	}
}

// maxTracked bounds the pidfds a cgroup sweep holds: beyond it, the
// sweep is woken by cgroup.events alone.
const maxTracked = 256

// sameProcs reports whether a and b hold the same processes.
func sameProcs(a, b []proc) bool {
	if len(a) != len(b) {
		return false
	}
	in := make(map[procKey]bool, len(a))
	for _, q := range a {
		in[procKey{q.pid, q.start}] = true
	}
	for _, q := range b {
		if !in[procKey{q.pid, q.start}] {
			return false
		}
	}
	return true
}

// subset reports whether every pid of a is in b.
func subset(a, b []int) bool {
	in := make(map[int]bool, len(b))
	for _, p := range b {
		in[p] = true
	}
	for _, p := range a {
		if !in[p] {
			return false
		}
	}
	return true
}

// drain empties a non-blocking eventfd.
func drain(fd int) {
	var b [4096]byte
	for {
		if n, err := unix.Read(fd, b[:]); n <= 0 || err != nil {
			return
		}
	}
}

// cannotStopPid says that pid, whose uid it names, could not be stopped.
func cannotStopPid(pid int, err error) error {
	return fmt.Errorf("supervisor: cannot stop pid %d (uid %s): %w", pid, procUID(pid), err)
}

// procUID is the real uid of pid as /proc shows it, for messages: a
// leftover this process may not signal is another user's, and whoever
// reads the message must know whose.
func procUID(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return f[0]
			}
		}
	}
	return "unknown"
}
