package fenced

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/oklog/run"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/errtext"
	"github.com/fencerun/fencerun/internal/logfield"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// Process is a started command as a run needs it; *supervisor.Process is
// one.
type Process interface {
	Pid() int
	// Wait returns once the command's whole tree is gone.
	Wait() supervisor.Status
	// Stop stops the tree: stop signal, grace, SIGKILL. It returns at once;
	// a later call may shorten the grace, never lengthen it.
	Stop(grace time.Duration)
	Signal(sig syscall.Signal) error
	// Group is the command's process group, recorded for status and for
	// the next holder should this one die.
	Group() store.ProcessID
	// Owns says whether pid is a process of the command's tree.
	Owns(pid int) bool
	// JobControl forwards the signals of forward to the tree (but returns
	// the error ends gives for one), and under a terminal stops and
	// continues this process with the command, asking k before the command
	// runs again, until done is closed (supervisor.Process.JobControl).
	JobControl(done <-chan struct{}, k supervisor.Keeper, forward <-chan os.Signal, ends func(os.Signal) error) error
}

// Ticks is the holder's end of `fencerun tick`; *ticksock.Server is one.
type Ticks interface {
	// Serve calls onTick for each tick from a pid that owns accepts, until
	// Close; known is closed once owns can answer for the command's tree
	// (it started, or it never will).
	Serve(owns func(pid int) bool, known <-chan struct{}, onTick func(time.Time)) error
	Close() error
}

// Config is one run: how to take the lease, what to start under it and
// how to stop it.
type Config struct {
	// Acquire takes the lease, blocking while it waits. A signal cancels
	// its ctx. A lease that was not acquired (busy, or the wait ran out) is
	// an error that wraps ErrNotAcquired; any other error is a failure.
	Acquire func(ctx context.Context) (store.Lease, error)
	// Start starts the command under lease. An error it returns (a
	// *supervisor.ExecError: not found, not executable) ends the run as
	// NotStarted.
	Start func(lease store.Lease) (Process, error)
	// StopLeftovers stops, to the end, the trees dead predecessors left
	// running on this host. elsewhere are the trees on other hosts, left
	// for a fencerun there.
	StopLeftovers func(ctx context.Context, trees []store.Leftover) (elsewhere []store.Leftover, err error)
	// Signals are the signals fencerun catches (S7), already subscribed
	// by the caller so that none is lost before Run: those it forwards,
	// and the Fatal ones.
	Signals <-chan os.Signal
	// Ticks, if not nil, is served while the command runs.
	Ticks Ticks
	// Notify, if not nil, speaks systemd's notify protocol (N1).
	Notify *Notify

	// Once is the run's --once ID (O1), or empty. A command that exits 0
	// under the lease marks it done as the lease is released
	// (store.Lease.ReleaseDone); any other end leaves it open. Whether it
	// was done already is Acquire's to find (ErrAlreadyDone).
	Once string

	TTL        time.Duration  // of the lease
	Grace      time.Duration  // between the stop signal and SIGKILL
	Timeout    time.Duration  // longest run of the command; 0: none
	StuckAfter time.Duration  // the watchdog's; 0: off
	Clock      boottime.Clock // nil: boottime.Kernel
	Logger     hclog.Logger   // nil: none
}

// ErrNotAcquired is wrapped by Acquire's error when the lease was not
// acquired: busy without waiting, or the wait ran out.
var ErrNotAcquired = errors.New("fenced: lease not acquired")

// ErrAlreadyDone is wrapped by Acquire's error when the run's Once ID
// was done already (found before the lease was taken, or once it was held,
// before any command could start): the run ends AlreadyDone.
var ErrAlreadyDone = errors.New("fenced: already done")

// NotAcquiredf is an error for Acquire to return when the lease was not
// acquired; it wraps ErrNotAcquired and says only what format says.
func NotAcquiredf(format string, args ...any) error {
	return &endError{msg: fmt.Sprintf(format, args...), is: ErrNotAcquired}
}

// AlreadyDonef is an error for Acquire to return when the run's Once ID
// was done already; it wraps ErrAlreadyDone and says only what format
// says.
func AlreadyDonef(format string, args ...any) error {
	return &endError{msg: fmt.Sprintf(format, args...), is: ErrAlreadyDone}
}

// endError is an Acquire's end that is not a failure: it says only msg,
// and is the sentinel is.
type endError struct {
	msg string
	is  error
}

func (e *endError) Error() string        { return e.msg }
func (e *endError) Is(target error) bool { return target == e.is }

// errTimeout ends the run group when --timeout runs out.
var errTimeout = errors.New("fenced: the command ran past its timeout")

// End says how a run ended.
type End int

const (
	// Exited: the command ended by itself; Outcome.Status says how.
	Exited End = iota + 1
	// Interrupted: a signal (Outcome.Signal) came before the command
	// started: while waiting for the lease, or while its predecessors'
	// leftovers were stopped. No command ran.
	Interrupted
	// NotAcquired: the lease was busy, or the wait ran out (Outcome.Err).
	NotAcquired
	// NotStarted: the command could not be started (Outcome.Err).
	NotStarted
	// FenceBroken: the lease was revoked, taken over or not renewed in
	// time; the command was stopped.
	FenceBroken
	// Cancelled: `fencerun cancel` asked; the command was stopped.
	Cancelled
	// HandedOver: a newer build asked for the resident role.
	HandedOver
	// Stuck: the command stopped ticking for StuckAfter.
	Stuck
	// TimedOut: the command ran past Timeout.
	TimedOut
	// Killed: a Fatal signal (Outcome.Signal) came while the command ran;
	// its tree was stopped. fencerun exits 128+N whatever the command's
	// own status (S7).
	Killed
	// Failed: fencerun itself failed (Outcome.Err).
	Failed
	// AlreadyDone: the run's Once ID was done already (Outcome.Err says
	// by whom); no command ran.
	AlreadyDone
)

// Outcome is how a run ended.
type Outcome struct {
	End End
	// Status is how the command's direct child ended, when it ran.
	Status supervisor.Status
	// Signal is the signal that ended an Interrupted or Killed run.
	Signal syscall.Signal
	// Err says why for NotAcquired, NotStarted and Failed.
	Err error
}

// Run takes the lease, runs the command under it and releases it, and says
// how it went. It returns only once the command's tree is gone and the
// lease was given back (or could not be, within min(TTL, 10s)).
func Run(ctx context.Context, cfg Config) Outcome {
	if cfg.Clock == nil {
		cfg.Clock = boottime.Kernel{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	lease, sig, err := acquire(ctx, &cfg)
	switch {
	case sig != 0:
		return Outcome{End: Interrupted, Signal: sig}
	case errors.Is(err, ErrNotAcquired):
		return Outcome{End: NotAcquired, Err: err}
	case errors.Is(err, ErrAlreadyDone):
		return Outcome{End: AlreadyDone, Err: err}
	case err != nil:
		return Outcome{End: Failed, Err: err}
	}
	log := cfg.Logger.With("fence", lease.Fence())
	keeper, err := fence.New(fence.Config{Lease: lease, TTL: cfg.TTL, Grace: cfg.Grace, Clock: cfg.Clock, Logger: log.Named("fence")})
	if err != nil {
		lease.Ended(store.Ending{How: store.EndFailed})
		_ = lease.Release(ctx)
		return Outcome{End: Failed, Err: err}
	}
	out := supervise(ctx, &cfg, log, lease, keeper)

	// Every exit path releases (S8), after the command's processes are gone.
	relCtx, cancel := context.WithTimeout(ctx, releaseWait(cfg.TTL))
	defer cancel()
	if out.End == NotStarted && keeper.Lost(relCtx) {
		// The start failed after the lease was lost (S5): exit 76, the
		// start's own error only logged, as it may be the loss's effect.
		log.Error("the lease was lost before the command could start; it never ran", "start_error", errtext.Sentence(out.Err))
		out = Outcome{End: FenceBroken}
	}
	lease.Ended(out.ending())
	if cfg.Once != "" && out.succeeded() {
		return releaseDone(relCtx, &cfg, keeper, out, log)
	}
	if err := keeper.Release(relCtx); err != nil {
		// The wrapper exiting drops the kernel lock that proves it alive, so
		// the next holder still takes over; say what was left behind.
		log.Warn("could not release the lease; the next holder will take it over once this process exits", "error", errtext.Sentence(err))
	} else {
		log.Info("released the lease")
	}
	return out
}

// ending is how the holding of a run that held the lease ended, for the
// key's history (N2).
func (o Outcome) ending() store.Ending {
	switch o.End {
	case Exited:
		if o.Status.Signal != 0 {
			return store.Ending{How: store.EndSignal, Signal: unix.SignalName(o.Status.Signal)}
		}
		code := o.Status.Code
		return store.Ending{How: store.EndExited, ExitStatus: &code}
	case Killed:
		return store.Ending{How: store.EndKilled, Signal: unix.SignalName(o.Signal)}
	case Interrupted:
		return store.Ending{How: store.EndNotStarted, Signal: unix.SignalName(o.Signal)}
	}
	if how, ok := endings[o.End]; ok {
		return store.Ending{How: how}
	}
	return store.Ending{How: store.EndFailed}
}

var endings = map[End]store.EndKind{
	FenceBroken: store.EndLost, Cancelled: store.EndCancelled, HandedOver: store.EndHandedOver,
	Stuck: store.EndStuck, TimedOut: store.EndTimeout, NotStarted: store.EndNotStarted,
}

// succeeded says whether the command exited 0 by itself, under the lease.
func (o Outcome) succeeded() bool {
	return o.End == Exited && o.Status.Code == 0 && o.Status.Signal == 0
}

// releaseDone releases the lease of a run whose command succeeded, with
// its Once ID marked done (O1). A lease lost before the mark could be
// written is a broken fence: the success does not count, the ID stays
// open. A mark that could not be written otherwise fails the run: the
// ID stays open, and the next run for it runs the command again.
func releaseDone(ctx context.Context, cfg *Config, keeper *fence.Keeper, out Outcome, log hclog.Logger) Outcome {
	err := keeper.ReleaseDone(ctx, cfg.Once)
	switch {
	case err == nil:
		log.Info("released the lease; marked done", "once", cfg.Once)
		return out
	case errors.Is(err, store.ErrLost):
		log.Error("the command succeeded, but the lease was lost before its success could be marked; the ID stays open", "once", cfg.Once, "error", errtext.Sentence(err))
		return Outcome{End: FenceBroken, Status: out.Status}
	}
	return Outcome{End: Failed, Status: out.Status, Err: fmt.Errorf("the command succeeded, but %s could not be marked done, so the next run for it runs it again: %w", cfg.Once, err)}
}

// releaseWait bounds how long a release may take before fencerun exits
// anyway.
func releaseWait(ttl time.Duration) time.Duration { return min(ttl, 10*time.Second) }

// acquire takes the lease unless a signal comes first. A signal that
// arrives while the lease is being taken ends the wait (S7): a lease taken
// at that very moment is given back, after its predecessors' leftovers are
// stopped as the command would have stopped them.
func acquire(ctx context.Context, cfg *Config) (store.Lease, syscall.Signal, error) {
	waitCtx, cancelWait := context.WithCancelCause(ctx)
	defer cancelWait(nil)
	heard := make(chan syscall.Signal, 1)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case s := <-cfg.Signals:
				if s == syscall.SIGWINCH {
					continue // a resized terminal is no reason to give up
				}
				heard <- s.(syscall.Signal)
				cancelWait(errInterrupted)
				return
			case <-stop:
				return
			}
		}
	}()
	lease, err := cfg.Acquire(waitCtx)
	close(stop)
	<-watched
	select {
	case sig := <-heard:
		if lease != nil {
			// Leftovers not confirmed gone stay with the key for the next holder.
			_ = stopLeftovers(ctx, cfg, lease, cfg.Logger)
			lease.Ended(store.Ending{How: store.EndNotStarted, Signal: unix.SignalName(sig)})
			_ = lease.Release(ctx)
		}
		return nil, sig, nil
	default:
	}
	if err == nil && lease == nil {
		err = errors.New("fenced: acquire returned no lease and no error")
	}
	return lease, 0, err
}

// errInterrupted is the cause of an acquisition a signal ended.
var errInterrupted = errors.New("fenced: interrupted by a signal")

// supervise runs the command under the keeper as one run group of the
// actors in actors.go and says how it ended.
func supervise(ctx context.Context, cfg *Config, log hclog.Logger, lease store.Lease, keeper *fence.Keeper) Outcome {
	cmd := newCommand(cfg, lease, log)
	keep := &keeping{keeper: keeper, cmd: cmd, log: log}
	var g run.Group
	g.Add(func() error { return keep.execute(ctx) }, keep.interrupt)
	req := newRequests(keeper)
	g.Add(req.execute, req.interrupt)
	sigs := &signals{in: cfg.Signals, cmd: cmd, keeper: keeper, done: make(chan struct{})}
	g.Add(sigs.execute, sigs.interrupt)
	var dog *fence.Watchdog
	if cfg.StuckAfter > 0 {
		dog, _ = fence.NewWatchdog(cfg.StuckAfter, cfg.Clock)
		g.Add(func() error { return dog.Run(ctx) }, func(error) { dog.Interrupt() })
	}
	if cfg.Ticks != nil {
		t := &ticks{server: cfg.Ticks, cmd: cmd, keeper: keeper, watchdog: dog}
		g.Add(t.execute, t.interrupt)
	}
	if cfg.Notify != nil {
		n := newNotifier(cfg, cmd, keeper, lease.Key(), lease.Fence(), log.Named("notify"))
		g.Add(n.execute, n.interrupt)
	}
	if cfg.Timeout > 0 {
		t := &timeout{after: cfg.Timeout, clock: cfg.Clock, cmd: cmd, done: make(chan struct{})}
		g.Add(t.execute, t.interrupt)
	}
	// The command last: the group starts its actors in order, and the
	// goroutine started last runs first on this P once Run waits (Go's
	// runnext), so the start goes before the others' set-up.
	g.Add(func() error { return cmd.execute(ctx) }, cmd.interrupt)
	err := g.Run()
	return outcome(err, keep, cmd, cfg, log)
}

// outcome reads how the group ended: the first actor's error, except that
// a fence that broke wins whatever ended the group first (S5).
func outcome(err error, keep *keeping, cmd *command, cfg *Config, log hclog.Logger) Outcome {
	var (
		end     *fence.EndError
		intr    *interruptedError
		fatal   *fatalError
		started *startError
		out     = Outcome{End: Exited, Status: cmd.status}
	)
	switch {
	case errors.As(err, &intr):
		return Outcome{End: Interrupted, Signal: intr.sig}
	case errors.As(err, &fatal):
		// Whatever else happened meanwhile, a fatal signal says how
		// fencerun ends (S7).
		log.Warn("fencerun got a fatal signal; the command was stopped", "signal", logfield.Signal(fatal.sig))
		return Outcome{End: Killed, Signal: fatal.sig, Status: cmd.status}
	case errors.As(err, &started):
		return Outcome{End: NotStarted, Err: started.err}
	case errors.Is(err, errTimeout):
		out.End = TimedOut
		log.Warn("the command ran past --timeout and was stopped", "timeout", logfield.Duration(cfg.Timeout))
	case errors.As(err, &end):
		out.End = endOf[end.Reason]
	case err != nil:
		// A part of fencerun itself failed (a timer, the tick socket, the
		// leftovers): the command was stopped for it, so its status is not
		// the answer.
		return Outcome{End: Failed, Err: err}
	}
	if errors.As(keep.err, &end) && end.Reason == fence.Lost {
		out.End = FenceBroken // also when it broke while the command was being stopped
	}
	if end != nil && !(end.Reason == fence.Lost && keep.told) {
		logStop(log, end)
	}
	return out
}

// logStop says why the command was stopped.
func logStop(log hclog.Logger, end *fence.EndError) {
	level := hclog.Warn
	if end.Reason == fence.Lost {
		level = hclog.Error
	}
	log.Log(level, "the command was stopped", "reason", end.Reason.String(), "detail", errtext.Sentence(end))
}

var endOf = map[fence.Reason]End{
	fence.Lost: FenceBroken, fence.Cancelled: Cancelled,
	fence.Handover: HandedOver, fence.Stuck: Stuck,
}

// byHost names each host of trees once, with how many records it has
// (E11): a host that is gone leaves its records until forgotten, and a
// list of every one grew with each takeover.
func byHost(trees []store.Leftover) string {
	var hosts []string
	n := map[string]int{}
	for _, t := range trees {
		if n[t.Host] == 0 {
			hosts = append(hosts, t.Host)
		}
		n[t.Host]++
	}
	var out []string
	for _, h := range hosts {
		what := "records"
		if n[h] == 1 {
			what = "record"
		}
		out = append(out, fmt.Sprintf("%s (%d %s)", store.Printable(h), n[h], what))
	}
	return strings.Join(out, ", ")
}

// stopLeftovers stops what dead predecessors left running (S2), so that
// nothing of their trees runs beside this holder's command, and then tells
// the store they are gone. It runs to the end, whatever else happens
// meanwhile: those processes are not ours to abandon. Until it succeeds the
// store keeps them for the next holder.
func stopLeftovers(ctx context.Context, cfg *Config, lease store.Lease, log hclog.Logger) error {
	p := lease.Predecessor()
	if p == nil {
		return nil
	}
	trees := p.Leftovers
	if len(trees) == 0 && p.Marker != "" {
		trees = []store.Leftover{{HolderPID: p.PID, Host: p.Host, Marker: p.Marker}}
	}
	if len(trees) == 0 {
		return nil
	}
	log.Info("the previous holder died holding the lease; stopping its leftovers", "pid", p.PID, "trees", len(trees))
	elsewhere, err := cfg.StopLeftovers(ctx, trees)
	if err != nil {
		return err
	}
	if len(elsewhere) > 0 {
		// Only a fencerun on that host can stop them (E5): they stay
		// recorded for it (LeftoversStopped forgets this host's only),
		// and they do not keep this host's from being forgotten.
		log.Warn("dead holders' leftovers may run on another host; they are left to a fencerun there "+
			"(prune there stops them; prune --forget-host HOST forgets a host gone for good)", "hosts", byHost(elsewhere))
	}
	if err := lease.LeftoversStopped(ctx); err != nil {
		log.Warn("could not record yet that the leftovers are gone; the release records it, else the next holder looks again", "error", err)
	}
	return nil
}
