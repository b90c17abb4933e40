package supervisor

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reg is this process's part in supervision: it is a child subreaper,
// reaps the orphans of running commands as they die, and hands the job
// signals sent to this process to the Processes that listen.
var reg registry

type registry struct {
	once sync.Once
	err  error

	mu        sync.Mutex
	procs     map[int]*Process  // running commands, by the direct child's pid, until reaped
	listeners map[*Process]bool // subscribed to the job signals and SIGCONT
}

// setup makes this process a child subreaper, once, and makes sure its
// signals are caught (Catch).
func setup() error {
	reg.once.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			reg.err = fmt.Errorf("supervisor: becoming a child subreaper: %w", err)
		}
	})
	Catch()
	return reg.err
}

// deadOrphans reports whether a child of this process may be an orphan
// that died and is for reapAdopted: whether the first dead child waitid(2)
// finds, without reaping it, is not a running command's direct child. A
// direct child that is dead is reaped by its own goroutine once its tree
// is gone, and reapAdopted runs then (reaped): until then the orphans
// behind it wait, as zombies, which are no longer of the tree. So the
// usual SIGCHLD, a command's own exit, reads nothing in /proc.
func deadOrphans() bool {
	var info childInfo
	err := unix.Waitid(unix.P_ALL, 0, (*unix.Siginfo)(unsafe.Pointer(&info)), unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil || info.pid == 0 {
		return false // no child, or none dead
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.procs[int(info.pid)] == nil
}

// reapAdopted reaps the dead children of this process that belong to a
// running command's tree (see Process.adopts), each by its pid: wait(-1)
// would take the exit status of children that others started and wait for.
// Direct children are reaped by their own goroutine.
func reapAdopted() {
	if foreignProc() {
		return
	}
	self := os.Getpid()
	kids, _ := children(self)
	procs := make(map[int]proc, len(kids))
	for _, pid := range kids {
		if q, err := readProc(pid); err == nil {
			procs[pid] = q
		}
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	reg.reap(procs)
}

// reap reaps the processes of procs that reapAdopted may. Call with mu held.
func (r *registry) reap(procs map[int]proc) {
	if len(r.procs) == 0 {
		return
	}
	self := os.Getpid()
	direct := r.markers()
	for pid, q := range procs {
		if r.procs[pid] != nil || !q.dead() || q.ppid != self {
			continue
		}
		for _, p := range r.procs {
			if q.pgid == p.pid || p.adopts(q, self, direct) {
				var ws syscall.WaitStatus
				syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				break
			}
		}
	}
}

// markers maps each running command's pid to its marker. Call with mu held.
func (r *registry) markers() map[int]string {
	m := make(map[int]string, len(r.procs))
	for pid, p := range r.procs {
		m[pid] = p.marker
	}
	return m
}
