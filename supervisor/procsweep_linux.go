package supervisor

import (
	"errors"
	"fmt"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/logfield"
)

// errUnverified: a process that a shared store's record names by its group
// or session, whose environment this process cannot read to find the
// record's marker in it.
var errUnverified = errors.New("named by a shared store's record, and its environment cannot be read to check that it is of the dead holder's tree")

// procSweep is a sweep without a cgroup: the tree is what s.members reads
// afresh. It owns the pidfds of the processes it waits for and the
// processes it found it cannot signal.
type procSweep struct {
	*sweep
	tracked    map[procKey]int   // pidfds of the processes waited for
	unkillable map[procKey]error // processes a signal failed on, never waited for
	untracked  bool              // a process of the last reading could not be given a pidfd
	killed     bool              // the deadline passed: the tree was frozen and SIGKILLed
}

func (s *sweep) runProcs(timer boottime.Timer) error {
	ps := &procSweep{sweep: s, tracked: map[procKey]int{}, unkillable: map[procKey]error{}}
	defer ps.close()
	ms, err := ps.scan()
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		if gone, err := ps.settled(); gone || err != nil {
			return err
		}
	}
	s.log.Debug("sending the stop signal", "signal", logfield.Signal(s.sig), "processes", len(ms))
	ps.send(s.sig, ms, false)
	ps.send(syscall.SIGCONT, ms, false)
	for {
		gone, err := ps.step()
		if err != nil {
			return err
		}
		if gone {
			return ps.failures()
		}
		if len(ps.tracked) == 0 && !ps.untracked {
			continue // they died between the reading and pidfd_open
		}
		if err := ps.wait(timer); err != nil {
			return err
		}
	}
}

// step kills the tree once the deadline passed, and reports whether it is
// gone, when no process it waits for is left.
func (ps *procSweep) step() (gone bool, err error) {
	if err := ps.cancelled(); err != nil {
		return false, err
	}
	if !ps.killed && ps.clock.Now() >= ps.deadline() {
		ps.killed = true
		ps.log.Warn("grace is over, killing what is left")
		if err := ps.freezeAndKill(); err != nil {
			return false, err
		}
	}
	if len(ps.tracked) > 0 {
		return false, nil
	}
	if gone, err := ps.settled(); gone || err != nil {
		return gone, err
	}
	if ps.killed {
		return false, ps.freezeAndKill()
	}
	return false, nil
}

// wait sleeps in poll(2) until a process it waits for ends, the deadline
// comes or moves, or (when some process could not be given a pidfd) a
// while has passed.
func (ps *procSweep) wait(timer boottime.Timer) error {
	timeout := -1
	if !ps.killed {
		timer.Set(ps.deadline())
	}
	if ps.untracked {
		timeout = int(untrackedRescan / time.Millisecond)
	}
	fds := []unix.PollFd{{Fd: int32(ps.wake), Events: unix.POLLIN}}
	keys := []procKey{{}}
	for k, fd := range ps.tracked {
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		keys = append(keys, k)
	}
	if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
		return fmt.Errorf("supervisor: poll: %w", err)
	}
	if fds[0].Revents != 0 {
		drain(ps.wake)
	}
	for i, f := range fds[1:] {
		if f.Revents != 0 {
			ps.untrack(keys[i+1])
		}
	}
	if ps.untracked {
		ps.untracked = false
		ps.close() // read all of it again
	}
	return nil
}

// scan reads the tree's live processes, but those that cannot be
// signalled, and opens a pidfd on each new one.
func (ps *procSweep) scan() ([]proc, error) {
	ms, err := ps.members()
	if err != nil {
		return nil, err
	}
	live := ms[:0]
	ps.untracked = false
	for _, q := range ms {
		k := procKey{q.pid, q.start}
		if ps.unkillable[k] != nil {
			continue
		}
		live = append(live, q)
		if _, ok := ps.tracked[k]; ok {
			continue
		}
		fd, err := openProc(q)
		switch {
		case err != nil:
			ps.log.Warn("cannot watch a process of the tree", "pid", q.pid, "error", err)
			ps.untracked = true
		case fd >= 0:
			ps.tracked[k] = fd
		}
	}
	return live, nil
}

// send signals the processes of ms: the group as a whole, and each process
// outside it; with each, every process (so that one that cannot be
// signalled is known, at SIGKILL time).
func (ps *procSweep) send(sig syscall.Signal, ms []proc, each bool) {
	if ps.group != 0 {
		if err := unix.Kill(-ps.group, sig); err != nil && err != unix.ESRCH {
			ps.log.Warn("cannot signal the process group", "pgid", ps.group, "signal", logfield.Signal(sig), "error", err)
		}
	}
	for _, q := range ms {
		if ps.group != 0 && q.pgid == ps.group && !each {
			continue
		}
		k := procKey{q.pid, q.start}
		var err error
		switch fd, ok := ps.tracked[k]; {
		case q.unverified:
			err = errUnverified
		case ok:
			err = sendSignal(fd, sig)
		default:
			err = signalProc(q, sig)
		}
		if err != nil {
			ps.log.Error("cannot signal a process of the tree", "pid", q.pid, "signal", logfield.Signal(sig), "error", err)
			ps.unkillable[k] = err
			ps.untrack(k)
		}
	}
}

// freezeAndKill stops every member with SIGSTOP (the group as a whole
// first), re-reading until a reading finds only stopped members (a stopped
// process cannot fork), twice in a row with the same members, and then
// kills them all. A member that does not stop (in uninterruptible sleep)
// is killed after freezeTries readings as it is; the caller reads again
// after.
func (ps *procSweep) freezeAndKill() error {
	if ps.group != 0 {
		ps.send(syscall.SIGSTOP, nil, true)
	}
	var last []proc
	for try := 0; ; try++ {
		if err := ps.cancelled(); err != nil {
			return err
		}
		ms, err := ps.scan()
		if err != nil {
			return err
		}
		running := false
		for _, q := range ms {
			if q.state != 'T' && q.state != 't' {
				running = true
			}
		}
		if !running && sameProcs(ms, last) || try == freezeTries {
			if len(ms) > 0 || ps.group != 0 {
				ps.send(syscall.SIGKILL, ms, true)
			}
			return nil
		}
		if running {
			ps.send(syscall.SIGSTOP, ms, true)
		}
		last = ms
	}
}

// settled reads the tree twice; it is gone when neither reading finds a
// member, no child appeared here in between (an orphan reparented while a
// reading walked below its dead parent), and the process group holds no
// live process.
func (ps *procSweep) settled() (bool, error) {
	for range 2 {
		var before []int
		if ps.kids != nil {
			before = ps.kids()
		}
		ms, err := ps.scan()
		if err != nil || len(ms) > 0 {
			return false, err
		}
		if ps.kids != nil && !subset(ps.kids(), before) {
			return false, nil
		}
	}
	if ps.kids == nil && ps.group != 0 {
		return ps.groupSettled()
	}
	return true, nil
}

// groupSettled reports whether the process group holds no live process,
// where no orphan comes to this process (a dead holder's tree): a process
// that forks and exits in a loop may be gone from every reading of /proc
// and still run. The kernel knows: a group with no process left is not
// there. One still there (a member, or a zombie nobody reaps) is stopped
// as a whole, so that nothing of it can fork, and read once more; what it
// finds live is waited for (continued, before the deadline).
func (ps *procSweep) groupSettled() (bool, error) {
	if err := unix.Kill(-ps.group, 0); err == unix.ESRCH {
		return true, nil
	}
	ps.send(syscall.SIGSTOP, nil, true)
	ms, err := ps.scan()
	if !ps.killed {
		ps.send(syscall.SIGCONT, nil, true)
	}
	return err == nil && len(ms) == 0, err
}

// untrack closes the pidfd of k, if it has one.
func (ps *procSweep) untrack(k procKey) {
	if fd, ok := ps.tracked[k]; ok {
		unix.Close(fd)
		delete(ps.tracked, k)
	}
}

// close closes every pidfd it holds.
func (ps *procSweep) close() {
	for _, fd := range ps.tracked {
		unix.Close(fd)
	}
	clear(ps.tracked)
}

// failures names the processes it could not signal, with their uid: a
// leftover this process may not signal is another user's, and whoever
// reads the message must know whose.
func (ps *procSweep) failures() error {
	if len(ps.unkillable) == 0 {
		return nil
	}
	var errs []error
	for k, err := range ps.unkillable {
		errs = append(errs, cannotStopPid(k.pid, err))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}
