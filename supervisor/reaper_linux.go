package supervisor

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reg is this process's part in supervision: it is a child subreaper, and
// reaps the orphans of running commands as they die.
var reg registry

type registry struct {
	once sync.Once
	err  error

	mu    sync.Mutex
	procs map[int]*Process // running commands, by the direct child's pid, until reaped
}

// setup makes this process a child subreaper and starts the reaper, once.
func setup() error {
	reg.once.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			reg.err = fmt.Errorf("supervisor: becoming a child subreaper: %w", err)
			return
		}
		reg.procs = make(map[int]*Process)
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGCHLD)
		go func() {
			for range c {
				if !foreignProc() { // else each Process reaps all: see pidns_linux.go
					reapAdopted()
				}
			}
		}()
	})
	return reg.err
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
