package fenced

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/logfield"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// The actors of a run group. Each is an execute/interrupt pair in the
// sense of oklog/run: when interrupt is called, execute returns soon, and
// interrupt is safe after execute returned. They talk to the command
// through its channels: only the command's goroutine starts or stops the
// process, and it owns the caught signals until the start, so a start is
// ordered against every decision to stop, and every signal, without a
// lock.

// command stops the predecessors' leftovers, starts the command unless a
// stop request or a signal came first, and applies every stop request
// until the tree is gone.
type command struct {
	cfg   *Config
	lease store.Lease
	log   hclog.Logger

	stops   chan time.Duration // stop requests: the instant the tree must be dead by, or 0
	started chan struct{}      // closed once proc is set
	gone    chan struct{}      // closed when the tree is gone, or the command never started

	proc   Process           // set before started is closed
	status supervisor.Status // set before gone is closed
}

func newCommand(cfg *Config, lease store.Lease, log hclog.Logger) *command {
	return &command{cfg: cfg, lease: lease, log: log,
		stops:   make(chan time.Duration),
		started: make(chan struct{}), gone: make(chan struct{})}
}

// interruptedError ends a run whose command never started because of a
// signal: exit 128+N.
type interruptedError struct{ sig syscall.Signal }

func (e *interruptedError) Error() string { return "interrupted by " + unix.SignalName(e.sig) }

// startError ends a run whose command could not be started.
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

func (c *command) execute(ctx context.Context) error {
	defer close(c.gone)
	if start, err := c.prepare(ctx); !start {
		return err
	}
	p, err := c.cfg.Start(c.lease)
	if err != nil {
		return &startError{err}
	}
	c.proc = p
	close(c.started) // from now on the signals actor forwards the signals
	return c.watch(ctx, p)
}

// prepare stops the predecessors' leftovers, to the end, and says whether
// the command may start. Until it starts, the signals are this actor's: a
// stop request or a signal means it never starts, and whichever came
// first says why (a signal: Interrupted; a stop: whoever asked).
func (c *command) prepare(ctx context.Context) (bool, error) {
	left := make(chan error, 1)
	go func() { left <- stopLeftovers(ctx, c.cfg, c.lease, c.log) }()
	var (
		stopped bool
		sig     syscall.Signal
	)
	heard := func(s os.Signal) {
		if s != syscall.SIGWINCH && !stopped && sig == 0 {
			sig = s.(syscall.Signal)
		}
	}
	for waiting := true; waiting; {
		select {
		case err := <-left:
			if err != nil {
				return false, err
			}
			waiting = false
		case <-c.stops:
			stopped = true
		case s := <-c.cfg.Signals:
			heard(s)
		}
	}
	// A signal already caught counts as before the start. One the kernel
	// delivers after this look, before the fork returns, is forwarded to
	// the command rather than ending the run: the two cannot be told apart.
	for drained := false; !drained; {
		select {
		case s := <-c.cfg.Signals:
			heard(s)
		default:
			drained = true
		}
	}
	switch {
	case sig != 0:
		return false, &interruptedError{sig}
	case stopped:
		return false, nil
	}
	return true, nil
}

// watch applies every stop request to the running command, with the
// earliest deadline any of them carried, until its tree is gone.
func (c *command) watch(ctx context.Context, p Process) error {
	began := c.cfg.Clock.Now()
	c.log.Info("command started", "pid", p.Pid())
	// Recorded beside the loop: a store that hangs on this write (a guard
	// lock held by someone else, a silent server) must not hold up a stop
	// that has to beat the lease's expiry (S3). The release waits for it.
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		if err := c.lease.SetCommand(ctx, p.Group(), supervisor.OwnSession()); err != nil {
			c.log.Warn("could not record the command's process group", "error", err)
		}
	}()
	waited := make(chan supervisor.Status, 1)
	go func() { waited <- p.Wait() }()
	var stopBy time.Duration
	for {
		select {
		case c.status = <-waited:
			ran := logfield.Duration(c.cfg.Clock.Now() - began)
			if c.status.Signal != 0 {
				c.log.Info("command ended", "signal", logfield.Signal(c.status.Signal), "duration", ran)
			} else {
				c.log.Info("command ended", "exit_code", c.status.Code, "duration", ran)
			}
			<-recorded
			return nil
		case by := <-c.stops:
			stopBy = earliest(stopBy, by)
			p.Stop(c.grace(stopBy))
		}
	}
}

func (c *command) interrupt(error) { c.stop(0) }

// stop asks for the command's tree to be stopped, now or instead of
// starting it; by, if not 0, is the instant by which it must be dead.
func (c *command) stop(by time.Duration) {
	select {
	case c.stops <- by:
	case <-c.gone:
	}
}

// known is closed once owns can answer for the whole tree: the command
// started, or it never will.
func (c *command) known() <-chan struct{} {
	k := make(chan struct{})
	go func() {
		defer close(k)
		select {
		case <-c.started:
		case <-c.gone:
		}
	}()
	return k
}

// owns says whether pid belongs to the running command's tree.
func (c *command) owns(pid int) bool {
	select {
	case <-c.started:
		return c.proc.Owns(pid)
	default:
		return false
	}
}

// grace is the time between stop signal and SIGKILL: the configured one,
// cut short so that the tree is dead by stopBy (S3).
func (c *command) grace(stopBy time.Duration) time.Duration {
	if stopBy != 0 {
		return max(0, min(c.cfg.Grace, stopBy-c.cfg.Clock.Now()))
	}
	return c.cfg.Grace
}

func earliest(a, b time.Duration) time.Duration {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// keeping runs the keeper: it ends when the lease is lost, and renews
// until the command's tree is gone, so that a fence that breaks while the
// command is being stopped still cuts its grace short (S3, S5).
//
// A lost lease is said at once, before the command is stopped (E10): the
// lines the stop makes ("command ended") follow the reason, and outcome
// does not say it again.
type keeping struct {
	keeper *fence.Keeper
	cmd    *command
	log    hclog.Logger
	err    error // how the keeper ended; read after the group
	told   bool  // the lost lease was logged
}

func (k *keeping) execute(ctx context.Context) error {
	k.err = k.keeper.Run(ctx)
	var end *fence.EndError
	if errors.As(k.err, &end) && end.Reason == fence.Lost {
		logStop(k.log, end)
		k.told = true
	}
	if end != nil && end.StopBy != 0 {
		k.cmd.stop(end.StopBy) // the tree must be dead before the lease can expire
	}
	return k.err
}

func (k *keeping) interrupt(error) {
	go func() { <-k.cmd.gone; k.keeper.Interrupt() }()
}

// requests ends the group when someone asked the holder to stop: cancel,
// handover.
type requests struct {
	keeper *fence.Keeper
	done   chan struct{}
}

func newRequests(k *fence.Keeper) *requests {
	return &requests{keeper: k, done: make(chan struct{})}
}

func (r *requests) execute() error {
	select {
	case reason := <-r.keeper.Requests():
		return &fence.EndError{Reason: reason}
	case <-r.done:
		return nil
	}
}

func (r *requests) interrupt(error) { close(r.done) }

// Fatal are the signals that would kill fencerun with a Go stack dump
// and its tree left behind (SIGABRT is systemd's watchdog signal,
// SIGSTKFLT one other projects' test suites send); sent to
// it, they stop the command's tree, release and end the run as Killed
// (S7). The caller subscribes them into Config.Signals.
var Fatal = []os.Signal{syscall.SIGABRT, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL,
	syscall.SIGFPE, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGSTKFLT}

func fatal(s os.Signal) bool {
	for _, f := range Fatal {
		if s == f {
			return true
		}
	}
	return false
}

// fatalError ends the group when a Fatal signal came while the command
// ran: it is stopped as on any interruption (stop signal, SIGCONT, grace,
// SIGKILL).
type fatalError struct{ sig syscall.Signal }

func (e *fatalError) Error() string { return "fencerun got " + unix.SignalName(e.sig) }

// signals forwards the signals fencerun caught (S7) to the command's group
// once it runs, until its tree is gone; the command decides what they
// mean. A Fatal signal is not forwarded: it ends the group, which stops the
// command. Before the start they are the command actor's. It is job control
// too (supervisor.Process.JobControl): under a terminal fencerun stops
// with its command and, continued, lets the command run again only once
// the keeper has confirmed the lease. A lease lost while stopped ends the
// group with the keeper's *fence.EndError (Lost), the command killed
// without running again.
type signals struct {
	in     <-chan os.Signal
	cmd    *command
	keeper *fence.Keeper
	done   chan struct{}
}

func (s *signals) execute() error {
	select {
	case <-s.cmd.started:
	case <-s.done:
		return nil
	}
	return s.cmd.proc.JobControl(s.done, s.keeper, s.in, func(sig os.Signal) error {
		if fatal(sig) {
			return &fatalError{sig.(syscall.Signal)}
		}
		return nil
	})
}

func (s *signals) interrupt(error) {
	go func() { <-s.cmd.gone; close(s.done) }()
}

// ticks serves `fencerun tick` from the command's tree: each tick is
// stamped by the keeper and fed to the watchdog. A command that is stopping
// may still tick, so it serves until the tree is gone.
type ticks struct {
	server   Ticks
	cmd      *command
	keeper   *fence.Keeper
	watchdog *fence.Watchdog // nil: none
}

func (t *ticks) execute() error {
	return t.server.Serve(t.cmd.owns, t.cmd.known(), func(at time.Time) {
		t.keeper.Tick(at)
		if t.watchdog != nil {
			t.watchdog.Tick()
		}
	})
}

func (t *ticks) interrupt(error) {
	go func() { <-t.cmd.gone; t.server.Close() }()
}

// timeout ends the group when the command has run for longer than after,
// counted from its start on the injected clock (CLOCK_BOOTTIME: a laptop
// that slept through it has run for as long as it slept).
type timeout struct {
	after time.Duration
	clock boottime.Clock
	cmd   *command
	done  chan struct{}
}

func (t *timeout) execute() error {
	select {
	case <-t.cmd.started:
	case <-t.done:
		return nil
	}
	timer, err := t.clock.NewTimer()
	if err != nil {
		return fmt.Errorf("fenced: timeout: %w", err)
	}
	defer timer.Close()
	timer.Set(t.clock.Now() + t.after)
	select {
	case <-timer.C():
		return errTimeout
	case <-t.done:
		return nil
	}
}

func (t *timeout) interrupt(error) { close(t.done) }
