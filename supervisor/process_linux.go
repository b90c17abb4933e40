package supervisor

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/logfield"
	"github.com/fencerun/fencerun/store"
)

// errFinished: the command's tree is gone and its direct child reaped; there
// is nothing left to signal.
var errFinished = errors.New("supervisor: command finished")

// Config says what to run and how to stop it.
type Config struct {
	// Argv is the command and its arguments. Argv[0] is looked up in the
	// PATH of Env (as execvp(3) does) unless it holds a slash, or Path is
	// set.
	Argv []string
	// Path is Argv[0] as LookPath with Env resolved it already, so that a
	// caller that checked the command before waiting for its lease does not
	// search PATH twice; "" looks it up here.
	Path string
	// Env is the command's whole environment.
	Env []string
	// Marker is an entry of Env unique to this run ("NAME=value"). Every
	// process whose environment holds it is counted in the command's tree;
	// empty disables that rule.
	Marker string
	// StopSignal is sent to the tree to stop it; zero means SIGTERM.
	StopSignal syscall.Signal
	// Grace is how long Wait gives the leftovers of a command that exited
	// by itself, between StopSignal and SIGKILL.
	Grace time.Duration
	// Logger is used as it is (nil: none); name it "supervisor".
	Logger hclog.Logger
	// Cgroup is the path of a cgroup to create and start the command in
	// (Hierarchy.NewPath): then the tree is exactly the cgroup. Empty: no
	// cgroup, the tree is found among this process's descendants.
	Cgroup string
	// Clock is what the grace runs on; nil: CLOCK_BOOTTIME.
	Clock boottime.Clock
}

// Process is a running command. Its methods are safe for concurrent use.
// Wait must be called: it is what reaps the command.
type Process struct {
	pid        int
	start      uint64 // the direct child's start time, see proc
	marker     string
	stopSignal syscall.Signal
	grace      time.Duration
	log        hclog.Logger
	tty        int // the controlling terminal, or -1
	cg         *cgroup
	clock      boottime.Clock
	foreign    bool          // /proc is another pid namespace's: see pidns_linux.go
	watch      *watcher      // stands in for Pdeathsig, which the exec clears; or nil
	allGone    chan struct{} // foreign: no child is left

	exited chan struct{} // the direct child exited
	reap   chan struct{} // Wait: the tree is gone, reap the direct child
	done   chan struct{} // the direct child is reaped
	swept  chan struct{} // the stop sweep ended
	status Status
	finish sync.Once

	stops        chan syscall.Signal // the direct child stopped, with this signal
	gaveTerminal atomic.Bool         // the command was given the terminal's foreground
	jobSigs      chan os.Signal      // job signals sent to this process (subscribe)
	cont         chan os.Signal      // this process was continued

	mu        sync.Mutex
	held      bool          // job control keeps a stopped command stopped
	finished  bool          // no more signals to the process group: it may be reused
	stopping  bool          // a sweep runs or ran
	sweptDone bool          // wake is closed
	deadline  time.Duration // of the sweep, on boottime
	wake      int           // eventfd: the sweep's deadline moved
}

// Prepared is a command's start made ready ahead of it (Prepare): the
// command looked up and this process a child subreaper. Nothing of the
// command runs, and nothing is made, until Start.
type Prepared struct {
	cfg  Config
	path string
	err  error // why the command cannot start: Start returns it
	used bool
}

// Prepare does what Prepared.Start does before the fork and needs neither
// the command's final environment nor its logger. Its failures (the
// command not found) are Start's: they are returned by Start, not here.
// cfg.Env is only used to look the command up when cfg.Path is empty; the
// Env and Logger given to Start are the command's.
func Prepare(cfg Config) *Prepared {
	pr := &Prepared{cfg: cfg}
	pr.err = pr.prepare()
	return pr
}

func (pr *Prepared) prepare() error {
	cfg := &pr.cfg
	if len(cfg.Argv) == 0 {
		return errors.New("supervisor: no command")
	}
	if cfg.Grace < 0 {
		return fmt.Errorf("supervisor: negative grace %v", cfg.Grace)
	}
	pr.path = cfg.Path
	if pr.path == "" {
		var err error
		if pr.path, err = LookPath(cfg.Argv[0], cfg.Env); err != nil {
			return err
		}
	}
	if err := setup(); err != nil {
		return err
	}
	return descriptorsFit()
}

// makeCgroup creates the command's cgroup (Config.Cgroup), bound to its
// marker and opened for clone3; nil without one.
func (pr *Prepared) makeCgroup(log hclog.Logger) (*cgroup, error) {
	cfg := &pr.cfg
	if cfg.Cgroup == "" {
		return nil, nil
	}
	cg, err := createCgroup(cfg.Cgroup)
	if err != nil {
		return nil, err
	}
	if cfg.Marker != "" {
		if err := bindCgroup(cfg.Cgroup, cfg.Marker); err != nil {
			log.Debug("could not bind the cgroup to this run; a shared store's next holder will not trust it", "error", err)
		}
	}
	return cg, nil
}

// Start runs the prepared command with env, its whole environment (which
// must hold the Config's Marker), logging to log (nil: none; name it
// "supervisor"), in its cgroup, which it makes (Config.Cgroup). It fails
// with an *ExecError when the command is not found (127) or cannot be
// executed (126), and with another error when the Config is invalid or
// this process cannot supervise (it must be able to become a child
// subreaper). It may be called once; Prepare(cfg).Start(cfg.Env, log) is
// the one way to start a command.
//
// Start marks every descriptor of this process from 3 on close-on-exec;
// the command gets 0, 1 and 2 and those this process's parent passed it
// (see inherited), each at its own number, and nothing else.
func (pr *Prepared) Start(env []string, log hclog.Logger) (*Process, error) {
	if pr.used {
		return nil, errors.New("supervisor: a prepared start was used already")
	}
	pr.used = true
	cfg, path := pr.cfg, pr.path
	if pr.err != nil {
		return nil, pr.err
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	cg, err := pr.makeCgroup(log)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Process, error) {
		if cg != nil {
			cg.remove()
		}
		return nil, err
	}
	if cfg.Marker != "" && !slices.Contains(env, cfg.Marker) {
		return fail(fmt.Errorf("supervisor: marker %q is not in the command's environment", cfg.Marker))
	}
	closeOnExec()
	p, err := newProcess(cfg, log, cg)
	if err != nil {
		return fail(err)
	}
	if err := p.fork(path, cfg.Argv, env); err != nil {
		return nil, err
	}
	return p, nil
}

// newProcess is the Process of a command about to start in cg (nil: none).
func newProcess(cfg Config, log hclog.Logger, cg *cgroup) (*Process, error) {
	p := &Process{
		foreign:    foreignProc(),
		allGone:    make(chan struct{}),
		clock:      cfg.Clock,
		marker:     cfg.Marker,
		stopSignal: cfg.StopSignal,
		grace:      cfg.Grace,
		log:        log,
		tty:        controllingTerminal(),
		cg:         cg,
		exited:     make(chan struct{}),
		stops:      make(chan syscall.Signal, 1),
		reap:       make(chan struct{}),
		done:       make(chan struct{}),
		swept:      make(chan struct{}),
	}
	if p.stopSignal == 0 {
		p.stopSignal = syscall.SIGTERM
	}
	if p.clock == nil {
		p.clock = boottime.Kernel{}
	}
	var err error
	p.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		p.closeTerminal()
		return nil, fmt.Errorf("supervisor: eventfd: %w", err)
	}
	return p, nil
}

// fork starts the command: path with argv and env, in its process group,
// under the terminal's foreground if this process has it, and in its
// cgroup. On failure it undoes what newProcess made, the cgroup included.
func (p *Process) fork(path string, argv, env []string) error {
	attr := &syscall.ProcAttr{
		Env:   env,
		Files: commandFiles(),
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	foreground := p.tty >= 0 && inForeground(p.tty)
	if foreground {
		p.gaveTerminal.Store(true)
		// Ctrl-C reaches the command, which can read and write the
		// terminal without SIGTTIN or SIGTTOU.
		attr.Sys.Foreground = true
		attr.Sys.Ctty = p.tty
	}
	if p.cg != nil {
		// clone3 with CLONE_INTO_CGROUP: not one instruction of the
		// command runs outside its cgroup.
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, p.cg.fd
		p.log.Debug("cgroup created", "cgroup", p.cg.path)
	}
	execPath, execArgv := p.execVia(path, argv, attr)
	p.subscribe()
	started := make(chan error)
	go p.run(execPath, execArgv, attr, started)
	if err := <-started; err != nil {
		p.watch.release()
		p.unsubscribe()
		p.closeTerminal()
		unix.Close(p.wake)
		if p.cg != nil {
			p.cg.remove()
		}
		failure := NotExecutable
		switch err {
		case syscall.EAGAIN, syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE:
			failure = NoFork // fencerun could not fork: its failure, not the command's
		}
		return &ExecError{Path: path, Err: err, Failure: failure}
	}
	p.log.Debug("started", "pid", p.pid, "path", path, "foreground", foreground)
	return nil
}

// execVia is the path and argv the child execs: the command's own, or the
// trampoline's (activation_linux.go) when the command is socket-activated
// or its exec clears its Pdeathsig; then a watcher stands in, and its
// pipe's write end is added to attr's files for the trampoline.
func (p *Process) execVia(path string, argv []string, attr *syscall.ProcAttr) (string, []string) {
	if !p.foreign && changesCredentials(path) {
		var err error
		if p.watch, err = startWatcher(); err != nil {
			p.log.Warn("the command's exec clears its Pdeathsig, and no watcher stands in", "error", err)
		}
	}
	listen, watch := activated(attr.Env), -1
	if p.watch != nil {
		// At its own number where that is free in the command's table
		// (a number below the highest inherited one that is not
		// inherited): the fork need not move it, which under an
		// open-file limit just above that descriptor (descriptorsFit)
		// it could not.
		fd := p.watch.w.Fd()
		if watch = int(fd); watch < len(attr.Files) && attr.Files[watch] == ^uintptr(0) {
			attr.Files[watch] = fd
		} else {
			watch = len(attr.Files)
			attr.Files = append(attr.Files, fd)
		}
	}
	if !listen && watch < 0 {
		return path, argv
	}
	return viaTrampoline(path, argv, listen, watch)
}

// run starts the child and reaps it. Pdeathsig fires when the thread that
// forked the child ends, not the process (go.dev/issue/27505), so this
// goroutine holds its thread until the child is reaped, and never unlocks
// it: the thread ends with the goroutine.
func (p *Process) run(path string, argv []string, attr *syscall.ProcAttr, started chan<- error) {
	runtime.LockOSThread()

	// Registered before the reaper can see the child's exit, so that it is
	// never taken for a reparented orphan and reaped from under us.
	reg.mu.Lock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err == nil {
		p.pid = pid
		if q, err := readProc(pid); err == nil && !p.foreign {
			p.start = q.start
		}
		reg.procs[pid] = p
	}
	reg.mu.Unlock()
	started <- err
	if err != nil {
		return
	}
	if p.foreign {
		p.runForeign(pid)
		return
	}

	if err := p.waitExit(pid); err != nil {
		p.log.Error("waiting for the command", "pid", pid, "error", err)
	}
	close(p.exited)

	<-p.reap
	if p.tty >= 0 {
		giveBackTerminal(p.tty, p.pid, p.gaveTerminal.Load(), p.log)
		p.closeTerminal()
	}
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	p.reaped(pid, ws, err)
}

// runForeign waits without /proc: every child is reaped as it ends (this
// process is their subreaper, or the namespace's init), the direct
// child's status kept, until none is left.
func (p *Process) runForeign(pid int) {
	ws, err := p.waitAll(pid)
	select {
	case <-p.exited:
	default:
		close(p.exited)
	}
	close(p.allGone)
	<-p.reap
	if p.tty >= 0 {
		giveBackTerminal(p.tty, p.pid, p.gaveTerminal.Load(), p.log)
		p.closeTerminal()
	}
	p.reaped(pid, ws, err)
}

// reaped records how the direct child ended and that it is reaped.
func (p *Process) reaped(pid int, ws syscall.WaitStatus, err error) {
	switch {
	case err != nil:
		p.log.Error("reaping the command", "pid", pid, "error", err)
		p.status = Status{Code: 255}
	case ws.Signaled():
		p.status = Status{Signal: ws.Signal()}
	default:
		p.status = Status{Code: ws.ExitStatus()}
	}
	// The orphans of the tree that died while the direct child was a
	// zombie: SIGCHLD's reaper left them (see deadOrphans).
	if deadOrphans() {
		reapAdopted()
	}
	reg.mu.Lock()
	delete(reg.procs, pid)
	reg.mu.Unlock()
	if p.status.Signal != 0 {
		p.log.Debug("reaped", "pid", pid, "signal", logfield.Signal(p.status.Signal))
	} else {
		p.log.Debug("reaped", "pid", pid, "code", p.status.Code)
	}
	p.unsubscribe()
	p.watch.release()
	close(p.done)
}

// Pid is the direct child's pid; it is also the command's process group.
func (p *Process) Pid() int { return p.pid }

// Group names the command's process group: its pid and start time; the
// zero ProcessID where /proc is another pid namespace's (the id means
// nothing outside this one).
func (p *Process) Group() store.ProcessID {
	if p.foreign {
		return store.ProcessID{}
	}
	return store.ProcessID{ID: p.pid, Start: p.start}
}

// Cgroup is the path of the command's cgroup, or "" without one.
func (p *Process) Cgroup() string {
	if p.cg == nil {
		return ""
	}
	return p.cg.path
}

// Exited is closed when the direct child has exited, before its leftovers
// are stopped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Wait waits for the direct child to exit, stops what is left of its tree
// (with the Config's StopSignal and Grace, unless Stop already began), waits
// until all of it is gone and reaped, gives the terminal's foreground back,
// and returns how the direct child ended. It may be called more than once.
func (p *Process) Wait() Status {
	<-p.exited
	p.stop(p.grace, false)
	<-p.swept
	p.finish.Do(func() {
		p.mu.Lock()
		p.finished = true
		p.mu.Unlock()
		close(p.reap)
	})
	<-p.done
	return p.status
}

// Stop stops the whole tree: the stop signal, then SIGCONT (a stopped
// process must run to act on it), to every process of it; SIGKILL after
// grace to whatever is left. It returns at once; Wait tells when the tree
// is gone. A later call can shorten the grace, never lengthen it.
func (p *Process) Stop(grace time.Duration) { p.stop(grace, true) }

func (p *Process) stop(grace time.Duration, shorten bool) {
	deadline := p.clock.Now() + max(grace, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.sweptDone:
	case !p.stopping:
		p.stopping = true
		p.deadline = deadline
		p.log.Debug("stopping", "pid", p.pid, "signal", logfield.Signal(p.stopSignal), "grace", logfield.Duration(grace))
		go p.sweep()
	case shorten && deadline < p.deadline:
		p.deadline = deadline
		wakeUp(p.wake)
	}
}

func (p *Process) sweep() {
	s := &sweep{
		log:     p.log,
		sig:     p.stopSignal,
		group:   p.pid,
		members: p.members,
		kids: func() []int {
			kids, _ := children(os.Getpid())
			return kids
		},
		cg:      p.cg,
		clock:   p.clock,
		foreign: p.foreign,
		gone:    p.allGone,
		deadline: func() time.Duration {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.deadline
		},
		wake: p.wake,
	}
	if err := s.run(); err != nil {
		p.log.Error("the command's tree could not be stopped entirely", "pid", p.pid, "error", err)
	}
	if p.cg != nil {
		// The cgroup is empty: the tree is gone (S2: the tree is the
		// cgroup). Its orphans that died here are reaped with the direct
		// child (reaped).
		t0 := time.Now()
		if err := p.cg.remove(); err != nil {
			p.log.Warn("could not remove the command's cgroup", "error", err)
		}
		p.log.Debug("cgroup removed", "cgroup", p.cg.path, "took", logfield.Duration(time.Since(t0)))
	}
	// The sweep's last reading found no live process of the tree and
	// reaped its dead orphans: none can die after it.
	p.mu.Lock()
	p.sweptDone = true
	unix.Close(p.wake)
	p.mu.Unlock()
	close(p.swept)
}

// Signal sends sig to the command's process group and to every other live
// process of its tree, and then SIGCONT to those of them that are stopped
// (unless sig stops or continues, or job control holds the command
// stopped). After Wait it returns errFinished.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return errFinished
	}
	var errs []error
	if p.foreign && nsInit() {
		// The namespace is the tree: kill(-1) reaches all of it.
		if err := unix.Kill(-1, sig); err != nil && err != unix.ESRCH {
			return fmt.Errorf("supervisor: signalling the pid namespace: %w", err)
		}
		return nil
	}
	if err := unix.Kill(-p.pid, sig); err != nil && err != unix.ESRCH {
		errs = append(errs, fmt.Errorf("supervisor: signalling process group %d: %w", p.pid, err))
	}
	ms, err := p.members()
	if err != nil {
		errs = append(errs, err)
	}
	for _, q := range ms {
		if q.pgid == p.pid {
			continue
		}
		if err := signalProc(q, sig); err != nil {
			errs = append(errs, fmt.Errorf("supervisor: signalling pid %d: %w", q.pid, err))
		}
	}
	if followedByCont(sig) && !p.held {
		// A stopped process acts on the signal only once it runs (S7):
		// continue what of the tree is stopped.
		group := false
		for _, q := range ms {
			switch {
			case q.state != 'T':
			case q.pgid != p.pid:
				signalProc(q, syscall.SIGCONT)
			case !group:
				group = true
				unix.Kill(-p.pid, syscall.SIGCONT)
			}
		}
	}
	return errors.Join(errs...)
}

// Owns reports whether pid is a live process of the command's tree. The
// answer may be stale by the time it is used; a pid cannot be reused while
// a peer holding a connection from it is alive, which is what it is for.
func (p *Process) Owns(pid int) bool {
	p.mu.Lock()
	finished := p.finished
	p.mu.Unlock()
	if finished {
		return false
	}
	if p.foreign {
		// A peer outside this namespace shows as pid 0; inside it, as
		// its init, every other process is the tree's.
		return nsInit() && pid > 1
	}
	q, err := readProc(pid)
	if err != nil || q.dead() {
		return false
	}
	if p.cg != nil {
		return p.cg.has(pid)
	}
	// The tree is below this process: walk up to it, and ask each process
	// on the way whether it is one of the tree's roots.
	self := os.Getpid()
	seed := p.seed(nil)
	owned := false
	for range 4096 {
		if q.pid == self {
			return owned
		}
		if q.pid <= 1 {
			return false
		}
		owned = owned || seed(q)
		if q, err = readProc(q.ppid); err != nil {
			return false
		}
	}
	return false
}

// members reads the tree's live processes, and reaps those of its orphans
// that died.
func (p *Process) members() ([]proc, error) {
	if p.foreign {
		return nil, nil // never read another namespace's /proc
	}
	if p.cg != nil {
		pids, err := p.cg.pids()
		if err != nil {
			return nil, err
		}
		var live []proc
		for _, pid := range pids {
			if q, err := readProc(pid); err == nil && !q.dead() {
				live = append(live, q)
			}
		}
		return live, nil
	}
	return p.below()
}

// below reads the tree's live processes among this process's descendants
// (see seed), and reaps those of its orphans that died.
func (p *Process) below() ([]proc, error) {
	procs, err := descendants()
	if err != nil {
		return nil, err
	}
	reg.mu.Lock()
	reg.reap(procs)
	direct := reg.markers()
	reg.mu.Unlock()
	var live []proc
	for _, q := range closure(procs, p.seed(direct)) {
		if !q.dead() {
			live = append(live, q)
		}
	}
	return live, nil
}

// seed is the rule for the roots of the tree among this process's
// descendants (closure adds their descendants): the process group, the
// reparented orphans, the marker. direct is reg.markers(), nil to read it.
func (p *Process) seed(direct map[int]string) func(proc) bool {
	self := os.Getpid()
	if direct == nil {
		reg.mu.Lock()
		direct = reg.markers()
		reg.mu.Unlock()
	}
	return func(q proc) bool {
		if q.pid == p.pid || q.pgid == p.pid || p.adopts(q, self, direct) {
			return true
		}
		return p.marker != "" && !q.dead() && hasEnv(q.pid, p.marker)
	}
}

// adopts reports whether q, if it is a child of this process that no
// Process started, counts as an orphan of p's tree reparented here: it
// started after p's command, and it is in no other command's group and
// carries no other command's marker. It may be in this process's own group:
// the command shares this process's session, so any of its processes can
// join that group (fencerun starts no other children). direct maps the pid
// of each running command to its marker.
func (p *Process) adopts(q proc, self int, direct map[int]string) bool {
	if q.ppid != self || q.start < p.start || p.watch != nil && q.pid == p.watch.pid {
		return false
	}
	if _, ok := direct[q.pid]; ok {
		return false
	}
	if _, ok := direct[q.pgid]; ok && q.pgid != p.pid {
		return false
	}
	if !q.dead() {
		for pid, m := range direct {
			if pid != p.pid && m != "" && hasEnv(q.pid, m) {
				return false
			}
		}
	}
	return true
}

func (p *Process) closeTerminal() {
	if p.tty >= 0 {
		unix.Close(p.tty)
		p.tty = -1
	}
}

// closeOnExec marks every descriptor from 3 on close-on-exec: Go opens its
// own so, but one inherited from this process's parent is not.
func closeOnExec() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

func wakeUp(eventfd int) {
	unix.Write(eventfd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}
