package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// untrackedRescan is how often a sweep re-reads the tree when some process
// of it could not be watched through a pidfd (out of descriptors).
const untrackedRescan = 50 * time.Millisecond

// sweep stops a set of processes that members reads afresh: the stop
// signal and SIGCONT to those there at the start, SIGKILL at the deadline
// to those there then and to any found after, until members finds none.
//
// It waits in poll(2) on a pidfd of each process it knows, and re-reads the
// set only when all of those are gone, or at the deadline: processes forked
// meanwhile (a trap's cleanup) are not signalled before the deadline, and
// must be gone before the sweep ends.
type sweep struct {
	log      hclog.Logger
	sig      syscall.Signal
	group    int                    // a process group signalled as a whole, or 0
	members  func() ([]proc, error) // the live processes to stop
	deadline func() time.Duration   // when SIGKILL is due, on boottime
	wake     int                    // eventfd: the deadline moved, or ctx ended
	ctx      context.Context        // nil: never cancelled
}

type procKey struct {
	pid   int
	start uint64
}

func (s *sweep) run() error {
	tracked := map[procKey]int{} // pidfds of the processes waited for
	defer func() {
		for _, fd := range tracked {
			unix.Close(fd)
		}
	}()
	unkillable := map[procKey]error{}
	untracked := false

	scan := func() ([]proc, error) {
		ms, err := s.members()
		if err != nil {
			return nil, err
		}
		live := ms[:0]
		untracked = false
		for _, q := range ms {
			k := procKey{q.pid, q.start}
			if unkillable[k] != nil {
				continue
			}
			live = append(live, q)
			if _, ok := tracked[k]; ok {
				continue
			}
			fd, err := openProc(q)
			switch {
			case err != nil:
				s.log.Warn("cannot watch a process of the tree", "pid", q.pid, "error", err)
				untracked = true
			case fd >= 0:
				tracked[k] = fd
			}
		}
		return live, nil
	}
	// send signals the processes of ms: the group as a whole, and each
	// process outside it; with each, every process (so that one that cannot
	// be signalled is known, at SIGKILL time).
	send := func(sig syscall.Signal, ms []proc, each bool) {
		if s.group != 0 {
			if err := unix.Kill(-s.group, sig); err != nil && err != unix.ESRCH {
				s.log.Warn("cannot signal the process group", "pgid", s.group, "signal", sig, "error", err)
			}
		}
		for _, q := range ms {
			if s.group != 0 && q.pgid == s.group && !each {
				continue
			}
			k := procKey{q.pid, q.start}
			var err error
			if fd, ok := tracked[k]; ok {
				err = sendSignal(fd, sig)
			} else {
				err = signalProc(q, sig)
			}
			if err != nil {
				s.log.Error("cannot signal a process of the tree", "pid", q.pid, "signal", sig, "error", err)
				unkillable[k] = err
				if fd, ok := tracked[k]; ok {
					unix.Close(fd)
					delete(tracked, k)
				}
			}
		}
	}

	ms, err := scan()
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return nil
	}
	s.log.Debug("sending the stop signal", "signal", s.sig, "processes", len(ms))
	send(s.sig, ms, false)
	send(syscall.SIGCONT, ms, false)
	killed := false
	for {
		if s.ctx != nil && s.ctx.Err() != nil {
			return context.Cause(s.ctx)
		}
		if !killed && boottime() >= s.deadline() {
			killed = true
			if ms, err = scan(); err != nil {
				return err
			}
			if len(ms) > 0 {
				s.log.Warn("grace is over, killing what is left", "processes", len(ms))
				send(syscall.SIGKILL, ms, true)
			}
		}
		if len(tracked) == 0 {
			if ms, err = scan(); err != nil {
				return err
			}
			if len(ms) == 0 {
				break
			}
			if killed {
				send(syscall.SIGKILL, ms, true)
			}
			if len(tracked) == 0 && !untracked {
				continue // they died between the reading and pidfd_open
			}
		}

		timeout := -1
		if !killed {
			timeout = int((s.deadline() - boottime() + time.Millisecond - 1) / time.Millisecond)
			timeout = max(timeout, 0)
		}
		if untracked && (timeout < 0 || timeout > int(untrackedRescan/time.Millisecond)) {
			timeout = int(untrackedRescan / time.Millisecond)
		}
		fds := []unix.PollFd{{Fd: int32(s.wake), Events: unix.POLLIN}}
		keys := []procKey{{}}
		for k, fd := range tracked {
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			keys = append(keys, k)
		}
		if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
			return fmt.Errorf("supervisor: poll: %w", err)
		}
		if fds[0].Revents != 0 {
			var b [8]byte
			unix.Read(s.wake, b[:])
		}
		for i, f := range fds[1:] {
			if f.Revents != 0 {
				unix.Close(int(f.Fd))
				delete(tracked, keys[i+1])
			}
		}
		if untracked {
			untracked = false
			for _, fd := range tracked {
				unix.Close(fd)
			}
			clear(tracked) // rescan
		}
	}
	if len(unkillable) == 0 {
		return nil
	}
	var errs []error
	for k, err := range unkillable {
		errs = append(errs, fmt.Errorf("supervisor: cannot stop pid %d: %w", k.pid, err))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// StopLeftovers stops the leftovers of a run whose wrapper died: every
// process on this host whose environment holds marker, and their
// descendants (not this process nor its ancestors). It sends sig (zero:
// SIGTERM), then SIGCONT, then SIGKILL after grace, and returns nil only
// when all of them are gone. It returns an error naming the processes it
// could not signal (another user's), or ctx's error when ctx ends first,
// and then some may be left.
func StopLeftovers(ctx context.Context, marker string, sig syscall.Signal, grace time.Duration, log hclog.Logger) error {
	if marker == "" {
		return errors.New("supervisor: no marker to find leftovers by")
	}
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("supervisor: eventfd: %w", err)
	}
	var mu sync.Mutex // wake is closed under mu, so the AfterFunc never writes to a reused fd
	defer func() {
		mu.Lock()
		unix.Close(wake)
		wake = -1
		mu.Unlock()
	}()
	defer context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if wake >= 0 {
			wakeUp(wake)
		}
	})()

	deadline := boottime() + max(grace, 0)
	found := false
	s := &sweep{
		log: log,
		sig: sig,
		members: func() ([]proc, error) {
			procs, err := readProcs()
			if err != nil {
				return nil, err
			}
			var live []proc
			for _, q := range closure(procs, func(q proc) bool { return !q.dead() && hasEnv(q.pid, marker) }) {
				if !q.dead() {
					live = append(live, q)
				}
			}
			if len(live) > 0 && !found {
				found = true
				log.Info("stopping the leftovers of the previous holder", "processes", len(live))
			}
			return live, nil
		},
		deadline: func() time.Duration { return deadline },
		wake:     wake,
		ctx:      ctx,
	}
	return s.run()
}
