package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/store"
)

// ErrOtherHost: a leftover runs on another host; only a process there may
// stop or count it.
var ErrOtherHost = errors.New("supervisor: leftovers on another host")

// StopConfig says how to stop the leftovers of a dead holder.
type StopConfig struct {
	StopSignal syscall.Signal // zero: SIGTERM
	Grace      time.Duration
	Logger     hclog.Logger // nil: none
	Clock      fence.Clock  // nil: CLOCK_BOOTTIME
}

// StopLeftovers stops a tree whose wrapper died (see store.Leftover), as
// a running command's is stopped: the stop signal and SIGCONT, the grace,
// then SIGKILL (cgroup.kill where it had a cgroup, which it then removes).
// It returns how many processes it found, and nil only when all of them
// are gone; an error wrapping ErrOtherHost for another host's leftover (it
// touches nothing), one naming the processes it could not signal (another
// user's), or ctx's cause when ctx ends first, and then some may be left.
func StopLeftovers(ctx context.Context, l store.Leftover, cfg StopConfig) (int, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	sig := cfg.StopSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	clock := cfg.Clock
	if clock == nil {
		clock = fence.BootClock{}
	}
	cg, members, err := findLeftovers(l, log)
	if err != nil {
		return 0, err
	}
	n := 0
	if cg != nil {
		pids, err := cg.pids()
		if err != nil {
			cg.close()
			return 0, err
		}
		n = len(pids)
	} else {
		ms, err := members()
		if err != nil {
			return 0, err
		}
		n = len(ms)
	}
	if n > 0 {
		log.Info("stopping the leftovers of a dead holder", "holder_pid", l.HolderPID, "processes", n, "cgroup", l.Cgroup)
	}

	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		if cg != nil {
			cg.close()
		}
		return 0, fmt.Errorf("supervisor: eventfd: %w", err)
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
	deadline := clock.Now() + max(cfg.Grace, 0)
	s := &sweep{
		log: log, sig: sig, members: members, cg: cg, clock: clock, wake: wake, ctx: ctx, foreign: foreignProc(),
		deadline: func() time.Duration { return deadline },
	}
	if err := s.run(); err != nil {
		if cg != nil {
			cg.close()
		}
		return n, err
	}
	if cg != nil {
		if err := cg.remove(); err != nil {
			log.Warn("could not remove the dead holder's cgroup", "error", err)
		}
		if members != nil {
			// What left the cgroup but not the recorded group, session
			// or marker: stopped as without a cgroup.
			s.cg = nil
			if err := s.run(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// CountLeftovers counts the live processes of a dead holder's tree on this
// host (an error wrapping ErrOtherHost for another host's).
func CountLeftovers(l store.Leftover) (int, error) {
	cg, members, err := findLeftovers(l, hclog.NewNullLogger())
	if err != nil {
		return 0, err
	}
	if cg != nil {
		defer cg.close()
		pids, err := cg.pids()
		return len(pids), err
	}
	ms, err := members()
	return len(ms), err
}

// findLeftovers opens l's cgroup if it is there, and returns how to read
// l's processes outside it: those carrying its marker (if validMarker),
// those of its process group and session (if the ids still name the
// recorded ones; of a Shared record only those carrying the marker), and
// their descendants, never this process nor its ancestors.
func findLeftovers(l store.Leftover, log hclog.Logger) (*cgroup, func() ([]proc, error), error) {
	if host, _ := os.Hostname(); l.Host != "" && l.Host != host {
		return nil, nil, fmt.Errorf("%w: %s (dead holder pid %d)", ErrOtherHost, l.Host, l.HolderPID)
	}
	marker := l.Marker
	if marker != "" && !validMarker(marker) {
		log.Warn("ignoring a marker of a record that fencerun never gives out", "holder_pid", l.HolderPID)
		marker = ""
	}
	var cg *cgroup
	if l.Cgroup != "" {
		if err := validCgroup(l.Cgroup); err != nil {
			log.Warn("ignoring the cgroup of a record", "error", err)
		} else if l.Shared && !boundTo(l.Cgroup, marker) {
			// A shared store's record may name only the cgroup of its own
			// run (see treeXattr); one that is gone is nothing to stop.
			if _, err := os.Stat(l.Cgroup); err == nil {
				log.Warn("ignoring a cgroup that a shared store's record names but its run did not make", "cgroup", l.Cgroup, "holder_pid", l.HolderPID)
			}
		} else {
			var err error
			cg, err = openCgroup(l.Cgroup)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, nil, err
			}
			// Gone (removed once empty), or never made: the fallback below
			// finds what it can. Where it is there, the fallback still
			// finds what moved itself out of it (root may).
		}
	}
	if foreignProc() {
		if cg != nil {
			return cg, nil, nil
		}
		return nil, nil, errors.New("supervisor: cannot look for a dead holder's processes: /proc is another pid namespace's (mount a /proc of this one: unshare --mount-proc)")
	}
	members := func() ([]proc, error) {
		procs, err := readProcs()
		if err != nil {
			return nil, err
		}
		group, session := leads(procs, l.Group), leads(procs, l.Session)
		named := func(q proc) bool { return group(q, q.pgid) || session(q, q.sid) }
		var live []proc
		if !l.Shared {
			for _, q := range closure(procs, func(q proc) bool {
				return !q.dead() && (named(q) || marker != "" && hasEnv(q.pid, marker))
			}) {
				if !q.dead() {
					live = append(live, q)
				}
			}
			return live, nil
		}
		// Whoever may write a shared store's records (a group store's
		// member, any etcd client) could name any process group or
		// session of the host: there a process is of the tree only if it
		// carries the marker. One of the named group or session whose
		// environment cannot be read is reported, never signalled.
		var unreadable []int
		found := closure(procs, func(q proc) bool {
			if q.dead() {
				return false
			}
			has, readable := readEnv(q.pid, marker)
			if !readable && named(q) {
				unreadable = append(unreadable, q.pid)
			}
			return marker != "" && has
		})
		for _, q := range found {
			if !q.dead() {
				live = append(live, q)
			}
		}
		for _, pid := range unreadable {
			if _, ok := found[pid]; !ok {
				q := procs[pid]
				q.unverified = true
				live = append(live, q)
			}
		}
		return live, nil
	}
	return cg, members, nil
}

// validMarker reports whether m is a marker in the exact form fencerun
// gives out (package fence makes and checks it): a record can then never
// name an unrelated process by an entry such as PATH=/usr/bin.
func validMarker(m string) bool {
	addr, ok := strings.CutPrefix(m, fence.TickMarker(""))
	return ok && fence.IsTickAddr(addr)
}

// leads returns whether a process with group (or session) id gid is in the
// group or session id names: the id must match, the process must have
// started no earlier than the recorded leader, and if a process with the
// leader's pid is alive it must be the recorded one. (While any member of
// a group or session lives, the kernel never gives its id to a new
// process, so the id cannot have been reused under a live member.)
func leads(procs map[int]proc, id store.ProcessID) func(q proc, gid int) bool {
	if id.ID <= 1 {
		return func(proc, int) bool { return false }
	}
	if leader, ok := procs[id.ID]; ok && !leader.dead() && leader.start != id.Start {
		return func(proc, int) bool { return false } // the id names a later process
	}
	return func(q proc, gid int) bool { return gid == id.ID && q.start >= id.Start }
}

// OwnSession is this process's session when this process leads it
// (setsid fencerun, a systemd service, cron's job shell aside): then every
// process of a command's tree that did not call setsid is in it, and it
// is worth recording for the next holder. Otherwise the zero ProcessID:
// the session is the caller's (a login shell's), never to be stopped.
func OwnSession() store.ProcessID {
	if foreignProc() {
		return store.ProcessID{} // the id means nothing outside this namespace
	}
	self := os.Getpid()
	q, err := readProc(self)
	if err != nil || q.sid != self {
		return store.ProcessID{}
	}
	return store.ProcessID{ID: self, Start: q.start}
}

// StopTrees stops every tree of trees that runs on this host, one after
// the other (see StopLeftovers), and returns how many processes it found.
// elsewhere are the trees on other hosts, left untouched: when err is nil,
// every other one is known gone.
func StopTrees(ctx context.Context, trees []store.Leftover, cfg StopConfig) (n int, elsewhere []store.Leftover, err error) {
	for _, t := range trees {
		found, err := StopLeftovers(ctx, t, cfg)
		n += found
		switch {
		case errors.Is(err, ErrOtherHost):
			elsewhere = append(elsewhere, t)
		case err != nil:
			return n, elsewhere, fmt.Errorf("stopping the leftovers of dead holder pid %d: %w", t.HolderPID, err)
		}
	}
	return n, elsewhere, nil
}

// CountTrees counts the live processes of the trees that run on this host.
func CountTrees(trees []store.Leftover) (int, error) {
	n := 0
	for _, t := range trees {
		c, err := CountLeftovers(t)
		if err != nil && !errors.Is(err, ErrOtherHost) {
			return n, err
		}
		n += c
	}
	return n, nil
}
