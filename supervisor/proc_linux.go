package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// proc is one process as /proc/PID/stat shows it. start (clock ticks since
// boot) tells a process from a later one that reused its pid.
type proc struct {
	pid, ppid, pgid, sid int
	state                byte
	threads              int // num_threads: live threads, and a zombie leader
	start                uint64
	// unverified: found only by a shared store's record naming its group
	// or session, and its environment cannot be read to check the marker:
	// never signalled, reported as not stopped (see findLeftovers).
	unverified bool
}

// dead reports whether q's thread group has ended. A leader whose thread
// ended before the others (pthread_exit in main) reads Z while they run:
// the group ends with its last thread, when num_threads counts only the
// leader.
func (q proc) dead() bool {
	return q.state == 'Z' && q.threads <= 1 || q.state == 'X' || q.state == 'x'
}

var errNoProc = errors.New("supervisor: no such process")

// readProcFile reads a small file of /proc (or of a cgroup) whole, with
// bare system calls: open, read, close. A sweep reads the children list
// of each of fencerun's threads several times over, and os.ReadFile's
// file (its poller registration, its stat, its cleanup) made that about a
// tenth of a short run's CPU (P1, docs/DESIGN.md). Errors are
// *fs.PathError, so fs.ErrNotExist and syscall.ESRCH match as before.
func readProcFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// readProc parses /proc/PID/stat. The command name may hold any byte, so
// the fields are read after its closing parenthesis.
func readProc(pid int) (proc, error) {
	b, err := readProcFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return proc{}, errNoProc
		}
		return proc{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, fmt.Errorf("supervisor: /proc/%d/stat: unexpected format", pid)
	}
	// Fields from 3 on: state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}, fmt.Errorf("supervisor: /proc/%d/stat: unexpected format", pid)
	}
	q := proc{pid: pid, state: f[0][0]}
	var e1, e2, e3, e4, e5 error
	q.ppid, e1 = strconv.Atoi(f[1])
	q.pgid, e2 = strconv.Atoi(f[2])
	q.sid, e4 = strconv.Atoi(f[3])
	q.threads, e5 = strconv.Atoi(f[17])
	q.start, e3 = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(e1, e2, e3, e4, e5); err != nil {
		return proc{}, fmt.Errorf("supervisor: /proc/%d/stat: %w", pid, err)
	}
	if q.state == 'Z' && q.threads > 1 {
		q.state = groupState(pid)
	}
	return q, nil
}

// groupState is the state of a thread group whose leader's thread ended
// before the others: that of a thread that is neither stopped nor ended,
// else 'T' when some thread is stopped, else 'Z'. A sweep that freezes
// the tree sees it stopped only when all of its threads are.
func groupState(pid int) byte {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, _ := os.ReadDir(dir)
	state := byte('Z')
	for _, t := range tasks {
		b, err := readProcFile(dir + t.Name() + "/stat")
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 || len(b) < i+3 {
			continue
		}
		switch s := b[i+2]; s {
		case 'Z', 'X', 'x':
		case 'T', 't':
			state = 'T'
		default:
			return s
		}
	}
	return state
}

// readProcs reads every process on the host. Processes that end while it
// reads are left out.
func readProcs() (map[int]proc, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("supervisor: reading /proc: %w", err)
	}
	procs := make(map[int]proc, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		q, err := readProc(pid)
		if errors.Is(err, errNoProc) {
			continue
		}
		if err != nil {
			return nil, err
		}
		procs[pid] = q
	}
	return procs, nil
}

// children lists the children of pid, from every thread's list: a child
// belongs to the thread that forked it, and a reparented one to whichever
// thread the kernel chose.
func children(pid int) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	tasks, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, t := range tasks {
		b, err := readProcFile(dir + t + "/children")
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && t == strconv.Itoa(pid) {
				return nil, err // no CONFIG_PROC_CHILDREN, or pid is gone
			}
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				pids = append(pids, c)
			}
		}
	}
	return pids, nil
}

// descendants reads the processes below this one. Walking the children
// lists reads a few files a descendant, where reading all of /proc reads
// every process on the host; without children lists it does the latter.
func descendants() (map[int]proc, error) {
	self := os.Getpid()
	kids, err := children(self)
	if err != nil {
		all, err := readProcs()
		if err != nil {
			return nil, err
		}
		below := make(map[int]proc)
		for pid, q := range closure(all, func(q proc) bool { return q.ppid == self }) {
			below[pid] = q
		}
		return below, nil
	}
	procs := make(map[int]proc)
	parent := map[int]int{}
	for _, c := range kids {
		parent[c] = self
	}
	for len(kids) > 0 {
		c := kids[len(kids)-1]
		kids = kids[:len(kids)-1]
		if _, seen := procs[c]; seen {
			continue
		}
		q, err := readProc(c)
		if err != nil || q.ppid != parent[c] {
			continue // gone, or reparented while we read
		}
		procs[c] = q
		if q.dead() {
			continue
		}
		grand, _ := children(c)
		for _, g := range grand {
			parent[g] = c
		}
		kids = append(kids, grand...)
	}
	return procs, nil
}

// hasEnv reports whether the environment pid was started with holds entry
// exactly. Environments that cannot be read (another user's, a zombie's,
// a kernel thread's) hold nothing.
func hasEnv(pid int, entry string) bool {
	found, _ := readEnv(pid, entry)
	return found
}

// readEnv is hasEnv, and whether the environment could be read at all.
func readEnv(pid int, entry string) (found, readable bool) {
	b, err := environ(pid)
	if err != nil {
		return false, false
	}
	if len(b) == 0 || entry == "" {
		return false, true
	}
	want := []byte(entry)
	for len(b) > 0 {
		e := b
		if i := bytes.IndexByte(b, 0); i >= 0 {
			e, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if bytes.Equal(e, want) {
			return true, true
		}
	}
	return false, true
}

// environ reads the environment pid was started with. A leader whose own
// thread ended (pthread_exit in main) has no memory to read it from, and
// its thread group's other threads do: it is read through one of them.
func environ(pid int) ([]byte, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/environ")
	if !errors.Is(err, syscall.ESRCH) {
		return b, err
	}
	tasks, terr := os.ReadDir(dir + "/task")
	for _, t := range tasks {
		if tb, terr := os.ReadFile(dir + "/task/" + t.Name() + "/environ"); terr == nil {
			return tb, nil
		}
	}
	if terr != nil {
		return nil, terr
	}
	return nil, err
}

// closure returns the processes of procs for which seed holds, and all
// their descendants, except this process and its ancestors. seed is asked
// at most once a process, from the top of each parent chain down, so a
// costly seed (reading an environment) is skipped for the descendants of a
// process already found.
func closure(procs map[int]proc, seed func(proc) bool) map[int]proc {
	self := os.Getpid()
	excluded := map[int]bool{0: true}
	for pid := self; pid > 0 && !excluded[pid]; pid = procs[pid].ppid {
		excluded[pid] = true
	}
	memo := make(map[int]bool, len(procs))
	var in func(pid int, depth int) bool
	in = func(pid int, depth int) bool {
		if v, ok := memo[pid]; ok {
			return v
		}
		q, ok := procs[pid]
		if !ok || excluded[pid] || depth > len(procs) {
			return false
		}
		memo[pid] = false // a cycle (pids reused mid-read) ends here
		v := in(q.ppid, depth+1) || seed(q)
		memo[pid] = v
		return v
	}
	tree := make(map[int]proc)
	for pid, q := range procs {
		if in(pid, 0) {
			tree[pid] = q
		}
	}
	return tree
}

// signalProc sends sig to q through a pidfd, after checking that the pid
// still names q and not a process that reused it. A process already gone is
// not an error.
func signalProc(q proc, sig syscall.Signal) error {
	fd, err := openProc(q)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	return sendSignal(fd, sig)
}

// openProc opens a pidfd on q, or returns -1 if q is gone.
func openProc(q proc) (int, error) {
	fd, err := unix.PidfdOpen(q.pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("supervisor: pidfd_open %d: %w", q.pid, err)
	}
	// The pidfd pins the pid: if it still shows q's start time, it is q.
	if cur, err := readProc(q.pid); err != nil || cur.start != q.start || cur.dead() {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

func sendSignal(pidfd int, sig syscall.Signal) error {
	err := unix.PidfdSendSignal(pidfd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}
