package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/ticksock"
	"github.com/fencerun/fencerun/store"
)

// errOtherHost: a leftover runs on another host; only a process there may
// stop or count it.
var errOtherHost = errors.New("supervisor: leftovers on another host")

// StopConfig says how to stop the leftovers of a dead holder.
type StopConfig struct {
	StopSignal syscall.Signal // zero: SIGTERM
	Grace      time.Duration
	Logger     hclog.Logger   // nil: none
	Clock      boottime.Clock // nil: CLOCK_BOOTTIME
}

// stopLeftovers stops a tree whose wrapper died (see store.Leftover), as
// a running command's is stopped: the stop signal and SIGCONT, the grace,
// then SIGKILL (cgroup.kill where it had a cgroup, which it then removes).
// It returns how many processes it found, and nil only when all of them
// are gone; an error wrapping errOtherHost for another host's leftover (it
// touches nothing), one naming the processes it could not signal (another
// user's), or ctx's cause when ctx ends first, and then some may be left.
//
// A record directs signals only where the tree proves it is the record's
// (S9): a cgroup only when its binding (treeXattr) is of the record's
// marker; a session only when its recorded leader is the dead holder and
// gone; a process group only when a live process of it carries the marker
// or is in that session (of a shared store's record, only the processes
// that carry the marker). A record that proves nothing (a legacy one
// whose cgroup is unbound, or one naming processes that are not its
// run's) stops nothing of what it names.
func stopLeftovers(ctx context.Context, l store.Leftover, cfg StopConfig) (int, error) {
	cfg = cfg.withDefaults()
	t, err := findLeftovers(l, cfg.Logger, true)
	if err != nil {
		return 0, err
	}
	defer t.close()
	n, err := t.count()
	if err != nil {
		return 0, err
	}
	if n > 0 {
		cfg.Logger.Info("stopping the leftovers of a dead holder", "holder_pid", l.HolderPID, "processes", n, "cgroup", l.Cgroup)
	}
	return n, t.stop(ctx, cfg)
}

func (cfg StopConfig) withDefaults() StopConfig {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.StopSignal == 0 {
		cfg.StopSignal = syscall.SIGTERM
	}
	if cfg.Clock == nil {
		cfg.Clock = boottime.Kernel{}
	}
	return cfg
}

// stop sweeps the tree: its cgroup, then what of it is outside (recorded
// group, session or marker), as without a cgroup.
func (t *leftoverTree) stop(ctx context.Context, cfg StopConfig) error {
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
	deadline := cfg.Clock.Now() + max(cfg.Grace, 0)
	s := &sweep{
		log: cfg.Logger, sig: cfg.StopSignal, members: t.members, cg: t.cg, clock: cfg.Clock, wake: wake, ctx: ctx, foreign: foreignProc(),
		deadline: func() time.Duration { return deadline },
	}
	if t.cg == nil {
		s.group = t.group
		return s.run()
	}
	if err := s.run(); err != nil {
		return err
	}
	if err := t.cg.remove(); err != nil {
		cfg.Logger.Warn("could not remove the dead holder's cgroup", "error", err)
	}
	t.cg = nil
	if t.members == nil {
		return nil
	}
	// What left the cgroup but not the recorded group, session or marker:
	// stopped as without a cgroup.
	s.cg, s.group = nil, t.group
	return s.run()
}

// countLeftovers counts the live processes of a dead holder's tree on this
// host (an error wrapping errOtherHost for another host's). It signals
// nothing, so it reads a private record's cgroup without its binding
// (status counts a live holder's).
func countLeftovers(l store.Leftover) (int, error) {
	t, err := findLeftovers(l, hclog.NewNullLogger(), false)
	if err != nil {
		return 0, err
	}
	defer t.close()
	return t.count()
}

// leftoverTree is how to find a dead holder's tree on this host.
type leftoverTree struct {
	l      store.Leftover
	acting bool    // stopLeftovers: it may signal (countLeftovers: it only reads)
	marker string  // l.Marker if validMarker, else ""
	cg     *cgroup // its cgroup, where it is there and may be acted on
	// group is l.Group's id once a reading found it live and proven the
	// tree's (a member carries the marker): it is then signalled as a
	// whole, so that nothing of it forks away from a signal.
	group int
	// members reads its processes outside the cgroup; nil where /proc is
	// another pid namespace's.
	members func() ([]proc, error)
}

func (t *leftoverTree) close() {
	if t.cg != nil {
		t.cg.close()
	}
}

// count is how many live processes the tree has: in its cgroup, else as
// members reads them.
func (t *leftoverTree) count() (int, error) {
	if t.cg != nil {
		pids, err := t.cg.pids()
		return len(pids), err
	}
	if t.members == nil {
		return 0, nil
	}
	ms, err := t.members()
	return len(ms), err
}

// findLeftovers opens l's cgroup if it is there (acting: only where it
// is bound to l's marker), and sets how to read l's processes outside it
// (see procs).
func findLeftovers(l store.Leftover, log hclog.Logger, acting bool) (*leftoverTree, error) {
	if host, _ := os.Hostname(); l.Host != "" && l.Host != host {
		return nil, fmt.Errorf("%w: %s (dead holder pid %d)", errOtherHost, l.Host, l.HolderPID)
	}
	t := &leftoverTree{l: l, acting: acting, marker: l.Marker}
	if t.marker != "" && !validMarker(t.marker) {
		log.Warn("ignoring a marker of a record that fencerun never gives out", "holder_pid", l.HolderPID)
		t.marker = ""
	}
	if l.Session.ID != 0 && l.Session.ID != l.HolderPID {
		// A holder records its session only when it leads it.
		log.Warn("ignoring a recorded session that its holder did not lead", "session", l.Session.ID, "holder_pid", l.HolderPID)
		t.l.Session = store.ProcessID{}
	}
	if err := t.openCgroup(log); err != nil {
		return nil, err
	}
	if foreignProc() {
		if t.cg != nil {
			return t, nil
		}
		return nil, errors.New("supervisor: cannot look for a dead holder's processes: /proc is another pid namespace's (mount a /proc of this one: unshare --mount-proc)")
	}
	t.members = t.procs
	return t, nil
}

// openCgroup opens the recorded cgroup, if there is one, it is there, and
// (acting, or of a shared store's record) it is bound to the marker.
func (t *leftoverTree) openCgroup(log hclog.Logger) error {
	l := t.l
	if l.Cgroup == "" {
		return nil
	}
	if err := validCgroup(l.Cgroup); err != nil {
		log.Warn("ignoring the cgroup of a record", "error", err)
		return nil
	}
	if (t.acting || l.Shared) && !boundTo(l.Cgroup, t.marker) {
		// A record may name only the cgroup of its own run (see
		// treeXattr); one that is gone is nothing to stop.
		if _, err := os.Stat(l.Cgroup); err == nil {
			log.Warn("ignoring a cgroup that a record names but its run did not make", "cgroup", l.Cgroup, "holder_pid", l.HolderPID)
		}
		return nil
	}
	cg, err := openCgroup(l.Cgroup)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// Gone (removed once empty), or never made: procs finds what it can.
	// Where it is there, procs still finds what moved itself out of it
	// (root may).
	t.cg = cg
	return nil
}

// procs reads the tree's live processes outside its cgroup: those carrying
// the marker, those of the recorded process group and session (where the
// ids still name the recorded ones; the group only where a live process of
// it carries the marker or is in the recorded session; of a shared store's
// record only those carrying the marker), and their descendants, never
// this process nor its ancestors.
func (t *leftoverTree) procs() ([]proc, error) {
	r, err := t.read()
	if err != nil {
		return nil, err
	}
	if !r.inGroup && !r.groupSeen && t.acting && !t.l.Shared && t.l.Group.ID > 1 && unix.Kill(-t.l.Group.ID, 0) == nil {
		// The group is there, but no reading finds a live process of it:
		// one that forks and exits in a loop is gone from every reading
		// of /proc. Stopped as a whole, it is read; not proven the
		// tree's, it is continued.
		unix.Kill(-t.l.Group.ID, syscall.SIGSTOP)
		if r, err = t.read(); err != nil || !r.inGroup {
			unix.Kill(-t.l.Group.ID, syscall.SIGCONT)
		}
		if err != nil {
			return nil, err
		}
	}
	if r.inGroup && !t.l.Shared {
		t.group = t.l.Group.ID
	}
	if t.l.Shared {
		return t.sharedProcs(r), nil
	}
	var live []proc
	for _, q := range closure(r.procs, func(q proc) bool {
		return r.marked(q) || r.inGroup && r.group(q, q.pgid) || r.inSession && r.session(q, q.sid)
	}) {
		if !q.dead() {
			live = append(live, q)
		}
	}
	return live, nil
}

// reading is one reading of /proc for a leftover tree.
type reading struct {
	procs          map[int]proc
	env            func(proc) (has, readable bool)
	group, session func(q proc, id int) bool // q's group or session id is the recorded one
	// inGroup: the recorded group is the tree's (a live process of it
	// carries the marker, or is in the holder's recorded session);
	// inSession: the recorded session may be acted on; groupSeen: a live
	// process with the group's id was read, or the id is another's.
	inGroup, inSession, groupSeen bool
}

func (r *reading) marked(q proc) bool { has, _ := r.env(q); return has }

// read reads every process, and which of the recorded group and session
// the marker proves the tree's.
func (t *leftoverTree) read() (*reading, error) {
	procs, err := readProcs()
	if err != nil {
		return nil, err
	}
	r := &reading{procs: procs, env: t.environs(procs),
		group: leads(procs, t.l.Group, false), session: leads(procs, t.l.Session, true)}
	// The holder's own session (see findLeftovers) needs no proof: its
	// recorded leader is the dead holder, and leads checks that it is
	// gone. A group in it, whose leader started after the holder, is its
	// command's.
	r.inSession = !t.l.Shared
	held := r.inSession && t.l.Session.ID > 1 && t.l.Group.Start >= t.l.Session.Start
	for _, q := range procs {
		if q.pgid != t.l.Group.ID || q.dead() {
			continue
		}
		r.groupSeen = true
		if r.group(q, q.pgid) && (held && r.session(q, q.sid) || r.marked(q)) {
			r.inGroup = true
			break
		}
	}
	if leader, ok := procs[t.l.Group.ID]; ok && !leader.dead() && leader.start != t.l.Group.Start {
		r.groupSeen = true // the id is a later process's: never to be stopped
	}
	return r, nil
}

// environs reads, for a live process of procs, whether its environment
// carries the marker and whether it could be read at all; each once.
func (t *leftoverTree) environs(procs map[int]proc) func(proc) (has, readable bool) {
	type env struct{ has, readable bool }
	seen := make(map[int]env, len(procs))
	return func(q proc) (bool, bool) {
		if q.dead() {
			return false, false
		}
		e, ok := seen[q.pid]
		if !ok {
			e.has, e.readable = readEnv(q.pid, t.marker)
			e.has = e.has && t.marker != ""
			seen[q.pid] = e
		}
		return e.has, e.readable
	}
}

// sharedProcs is procs for a shared store's record. Whoever may write
// one (a group store's member, any etcd client) could name any process
// group or session of the host: there a process is of the tree only if it
// carries the marker. A process whose environment cannot be read is
// reported, never signalled, where it may be the tree's: in the named
// group or session, or (issue 26) of the dead holder's uid and started
// since its command (a setsid leftover of another member, whose marker
// only root could read).
func (t *leftoverTree) sharedProcs(r *reading) []proc {
	suspect := t.suspect()
	var unreadable []int
	found := closure(r.procs, func(q proc) bool {
		has, readable := r.env(q)
		if !readable && !q.dead() && (r.group(q, q.pgid) || r.session(q, q.sid) || suspect(q)) {
			unreadable = append(unreadable, q.pid)
		}
		return has
	})
	var live []proc
	for _, q := range found {
		if !q.dead() {
			live = append(live, q)
		}
	}
	for _, pid := range unreadable {
		if _, ok := found[pid]; !ok {
			q := r.procs[pid]
			q.unverified = true
			live = append(live, q)
		}
	}
	return live
}

// suspect returns whether a process whose environment cannot be read may
// be of the tree: it runs as the dead holder's uid (the owner of the tick
// socket its marker names, which SIGKILL leaves behind) and started no
// earlier than the recorded command. Without the socket, none is.
func (t *leftoverTree) suspect() func(proc) bool {
	var st unix.Stat_t
	addr, _ := strings.CutPrefix(t.marker, ticksock.Marker(""))
	if addr == "" || unix.Lstat(addr, &st) != nil || int(st.Uid) == os.Geteuid() {
		return func(proc) bool { return false }
	}
	return func(q proc) bool {
		var ps unix.Stat_t
		return q.start >= t.l.Group.Start && unix.Stat("/proc/"+strconv.Itoa(q.pid), &ps) == nil && ps.Uid == st.Uid
	}
}

// validMarker reports whether m is a marker in the exact form fencerun
// gives out (package ticksock makes and checks it): a record can then never
// name an unrelated process by an entry such as PATH=/usr/bin.
func validMarker(m string) bool {
	addr, ok := strings.CutPrefix(m, ticksock.Marker(""))
	return ok && ticksock.IsAddr(addr)
}

// leads returns whether a process with group (or session) id gid is in the
// group or session id names: the id must match, the process must have
// started no earlier than the recorded leader, and if a process with the
// leader's pid is alive it must be the recorded one. (While any member of
// a group or session lives, the kernel never gives its id to a new
// process, so the id cannot have been reused under a live member.)
//
// A session's recorded leader is the dead holder itself: while it lives,
// the session is not a dead holder's (deadLeader).
func leads(procs map[int]proc, id store.ProcessID, deadLeader bool) func(q proc, gid int) bool {
	if id.ID <= 1 {
		return func(proc, int) bool { return false }
	}
	if leader, ok := procs[id.ID]; ok && !leader.dead() && (leader.start != id.Start || deadLeader) {
		return func(proc, int) bool { return false } // the id names a later process, or a live holder
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
	if sid, err := unix.Getsid(0); err != nil || sid != self {
		return store.ProcessID{} // the usual case: no /proc read
	}
	q, err := readProc(self)
	if err != nil || q.sid != self {
		return store.ProcessID{}
	}
	return store.ProcessID{ID: self, Start: q.start}
}

// StopTrees stops every tree of trees that runs on this host, one after
// the other (see stopLeftovers), and returns how many processes it found.
// elsewhere are the trees on other hosts, left untouched: when err is nil,
// every other one is known gone.
func StopTrees(ctx context.Context, trees []store.Leftover, cfg StopConfig) (n int, elsewhere []store.Leftover, err error) {
	for _, t := range trees {
		found, err := stopLeftovers(ctx, t, cfg)
		n += found
		switch {
		case errors.Is(err, errOtherHost):
			elsewhere = append(elsewhere, t)
		case err != nil:
			return n, elsewhere, fmt.Errorf("stopping the leftovers of dead holder pid %d: %w", t.HolderPID, err)
		}
	}
	return n, elsewhere, nil
}

// Remain reports whether StopTrees has anything to do on this host: a
// live process of a tree, or the cgroup of one, bound to its run, that
// its command left empty when it died with its wrapper. Such a cgroup
// goes only when a stopper removes it (stop), or it stays forever.
func Remain(trees []store.Leftover) (bool, error) {
	host, _ := os.Hostname()
	for _, l := range trees {
		if l.Cgroup != "" && (l.Host == "" || l.Host == host) && validCgroup(l.Cgroup) == nil && boundTo(l.Cgroup, l.Marker) {
			return true, nil
		}
	}
	n, err := CountTrees(trees)
	return n > 0, err
}

// CountTrees counts the live processes of the trees that run on this host.
func CountTrees(trees []store.Leftover) (int, error) {
	n := 0
	for _, t := range trees {
		c, err := countLeftovers(t)
		if err != nil && !errors.Is(err, errOtherHost) {
			return n, err
		}
		n += c
	}
	return n, nil
}
