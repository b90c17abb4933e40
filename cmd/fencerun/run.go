package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"
	"github.com/oklog/run"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/internal/duration"
	"github.com/fencerun/fencerun/resident"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// RunCmd is `fencerun run`.
type RunCmd struct {
	Key          *string        `placeholder:"KEY" help:"Hold the keyed lease KEY: letters, digits and . _ - : /, starting with a letter or digit, at most 80 bytes."`
	Resident     string         `placeholder:"PATH" help:"Hold the resident role of the store file PATH: one live process per store, elected by a kernel lock on PATH's .resident.lock beside it."`
	TTL          time.Duration  `name:"ttl" default:"30s" help:"Lease duration, renewed every TTL/3; at least 1s. If renewals fail, the command's whole tree is dead before the lease can expire."`
	NoWait       bool           `short:"n" help:"Fail at once (exit 75, see -E) if the lease is busy: the same as -w 0."`
	Wait         *duration.Wait `short:"w" placeholder:"D" help:"Give up waiting for the lease after D (exit 75, see -E): 0 does not wait (as flock -w 0), forever waits without limit. Default: forever for keys, 0 for residents (a standby says --wait forever). Waiters are served in arrival order."`
	ConflictExit int            `name:"conflict-exit-code" short:"E" default:"75" help:"Exit code when the lease was not acquired."`
	Grace        time.Duration  `default:"10s" help:"Time between the stop signal and SIGKILL of the command's process group, whenever fencerun stops it (capped so that a lost lease's command is dead before expiry)."`
	KillSignal   string         `default:"TERM" help:"The signal that asks the command to stop (name like TERM or SIGTERM, or number)."`
	Timeout      time.Duration  `default:"0" help:"Longest run of the command, as timeout(1): then it is stopped and fencerun exits 124. 0 means none."`
	Name         string         `placeholder:"TEXT" help:"Holder name shown by status (default: the command's base name)."`
	Reason       string         `placeholder:"TEXT" help:"Why this holder runs; shown by status."`
	StuckAfter   *time.Duration `placeholder:"D" help:"Stop a command that ran 'fencerun tick' at least once and then not for this long (exit 78). Default off for keys, 5m for residents; 0 turns it off."`
	NoHandover   bool           `help:"Resident: never ask an older build to hand over."`
	HandoverWait time.Duration  `default:"30s" help:"Resident: how long to wait for the holder to hand over."`
	Cgroup       string         `enum:"auto,require,off" default:"auto" help:"auto: run the command in a cgroup of its own where a writable cgroup v2 hierarchy exists (root, or a systemd-delegated subtree), so that its whole tree is found and killed exactly; require: exit 125 where none does; off: find the tree among fencerun's descendants."`

	Command []string `arg:"" optional:"" passthrough:"partial" help:"The command and its arguments, after --."`

	cgroup string // the command's cgroup path, if contained
}

// Validate checks the flags (B2) before anything touches the disk.
func (r *RunCmd) Validate(kctx *kong.Context) error {
	if len(r.Command) > 0 && r.Command[0] == "--" {
		r.Command = r.Command[1:] // kong's partial passthrough keeps the separator
	}
	if r.NoWait && r.Wait != nil && !r.Wait.None() {
		// What is typed beats what is exported: FENCERUN_WAIT=10m in a
		// profile must not break a cron line's -n. Typed together, or
		// exported together, they contradict each other (below).
		switch n, w := typed(kctx, "no-wait"), typed(kctx, "wait"); {
		case n && !w:
			r.Wait = nil
		case w && !n:
			r.NoWait = false
		}
	}
	switch {
	case r.Key == nil && r.Resident == "":
		return usage("run needs --key KEY or --resident PATH")
	case r.Key != nil && r.Resident != "":
		return usage("run takes --key or --resident, not both")
	case len(r.Command) == 0:
		return usage("run needs a command after --, for example: fencerun run --key demo -- echo hello")
	case r.TTL < fence.MinTTL:
		return usage("--ttl %v is under the minimum of %v", r.TTL, fence.MinTTL)
	case r.Grace < 0:
		return usage("--grace %v is negative", r.Grace)
	case r.Timeout < 0:
		return usage("--timeout %v is negative", r.Timeout)
	case r.StuckAfter != nil && *r.StuckAfter < 0:
		return usage("--stuck-after %v is negative", *r.StuckAfter)
	case r.HandoverWait < 0:
		return usage("--handover-wait %v is negative", r.HandoverWait)
	case r.NoWait && r.Wait != nil && !r.Wait.None():
		return usage("--no-wait and --wait %v contradict each other", *r.Wait)
	case r.ConflictExit < 0 || r.ConflictExit > 255:
		return usage("--conflict-exit-code %d is not an exit code (0 to 255)", r.ConflictExit)
	}
	if _, err := parseSignal(r.KillSignal); err != nil {
		return usage("--kill-signal: %v", err)
	}
	if err := store.ValidateText("--name", r.Name); err != nil {
		return usage("%v", err)
	}
	if err := store.ValidateText("--reason", r.Reason); err != nil {
		return usage("%v", err)
	}
	if r.Resident != "" {
		if err := validResident(r.Resident); err != nil {
			return err
		}
	}
	if r.Key != nil {
		return validKey(*r.Key)
	}
	return nil
}

// typed reports whether the flag name was given on the command line rather
// than by its environment variable or default.
func typed(kctx *kong.Context, name string) bool {
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == name && !p.Resolved {
			return true
		}
	}
	return false
}

// forwarded are the signals fencerun passes to the command's group (S7).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// signalled is the cause of a wait that a signal ended: exit 128+N.
type signalled struct{ sig syscall.Signal }

func (s signalled) Error() string { return "interrupted by " + unix.SignalName(s.sig) }
func (s signalled) ExitCode() int { return 128 + int(s.sig) }

// errGaveUp is the cause of a wait that --wait ended.
var errGaveUp = errors.New("gave up waiting")

// errTimeout ends the run group when --timeout runs out.
var errTimeout = errors.New("the command ran past --timeout")

// Run acquires the lease, runs the command under it and releases.
func (r *RunCmd) Run(ctx context.Context, g *Globals) error {
	log := g.log
	stopSig, _ := parseSignal(r.KillSignal)

	// Fail fast on a command that cannot run, before waiting in any queue,
	// with the PATH the command will get.
	path, err := supervisor.LookPath(r.Command[0], os.Environ())
	if err != nil {
		var ee *supervisor.ExecError
		if errors.As(err, &ee) {
			return fail(ee.Code(), "%v", err)
		}
		return fail(supervisor.ExitFailed, "%v", err)
	}

	// Signals are caught from here on: one while waiting ends the wait.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	ticks, err := g.listenTicks(log.Named("tick"))
	if err != nil {
		return err
	}
	defer ticks.Close()
	claim := store.Claim{
		Name:   orDefault(r.Name, filepath.Base(r.Command[0])),
		Reason: r.Reason,
		TTL:    r.TTL,
		Wait:   !r.wait().None(),
		Marker: fence.TickMarker(ticks.Addr()),
	}
	if r.Cgroup != "off" {
		h, err := supervisor.FindHierarchy()
		switch {
		case err == nil:
			r.cgroup = h.NewPath()
			claim.Cgroup = r.cgroup
		case r.Cgroup == "require":
			return fail(supervisor.ExitFailed, "--cgroup require: %v", err)
		default:
			log.Debug("no cgroup for the command; finding its tree among fencerun's descendants", "reason", err)
		}
	}

	lease, env, err := r.acquireUnlessSignalled(ctx, g, claim, path, stopSig, sigs)
	if err != nil {
		return err
	}
	log = log.With("fence", lease.Fence())
	// The keeper's clock starts from the lease's Term: the moment before
	// the store wrote the expiry, however long that write took.
	keeper, err := fence.New(fence.Config{Lease: lease, TTL: r.TTL, Grace: r.Grace, Logger: log.Named("fence")})
	if err != nil {
		_ = lease.Release(ctx)
		return usage("%v", err)
	}
	code, err := r.supervise(ctx, log, lease, keeper, ticks, append(env, claim.Marker), claim.Marker, stopSig, sigs)

	// Every exit path releases (S8), after the command's processes are gone.
	relCtx, cancel := context.WithTimeout(ctx, releaseWait(r.TTL))
	defer cancel()
	if rerr := keeper.Release(relCtx); rerr != nil {
		// The wrapper exiting drops the kernel lock that proves it alive, so
		// the next holder still takes over; say what was left behind.
		log.Warn("could not release the lease; the next holder will take it over once this process exits", "error", rerr)
	}
	if err != nil {
		return err
	}
	return exitCode(code)
}

// acquireUnlessSignalled acquires the lease; a signal that arrives before
// it is held, or while it is being taken, ends the wait (S7): the lease is
// given back and fencerun exits 128+N without starting the command.
func (r *RunCmd) acquireUnlessSignalled(ctx context.Context, g *Globals, claim store.Claim, path string, stopSig syscall.Signal, sigs <-chan os.Signal) (store.Lease, []string, error) {
	waitCtx, cancelWait := context.WithCancelCause(ctx)
	defer cancelWait(nil)
	acqCtx := waitCtx
	if w := r.wait(); !w.Forever() && !w.None() {
		var cancel context.CancelFunc
		acqCtx, cancel = context.WithTimeoutCause(waitCtx, w.Limit(), errGaveUp)
		defer cancel()
	}
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGWINCH {
					continue // a resized terminal is no reason to give up
				}
				cancelWait(signalled{s.(syscall.Signal)})
				return
			case <-stop:
				return
			}
		}
	}()
	lease, env, err := r.acquire(acqCtx, g, claim, path)
	close(stop)
	<-watched
	var sig signalled
	if errors.As(context.Cause(waitCtx), &sig) {
		if lease != nil {
			// Stop a dead predecessor's leftovers as the command would have;
			// any not confirmed gone stay with the key for the next holder.
			_ = stopLeftovers(ctx, lease, stopSig, r.Grace, g.log)
			_ = lease.Release(ctx)
		}
		return nil, nil, sig
	}
	return lease, env, err
}

// releaseWait bounds how long a release may take before fencerun exits
// anyway.
func releaseWait(ttl time.Duration) time.Duration { return min(ttl, 10*time.Second) }

// acquire takes the lease or says why not, and returns the environment the
// command gets.
func (r *RunCmd) acquire(ctx context.Context, g *Globals, claim store.Claim, path string) (store.Lease, []string, error) {
	env := withoutFencerunVars(os.Environ())
	if r.Resident != "" {
		return r.acquireResident(ctx, g, claim, path, env)
	}
	st, err := g.openStore(true)
	if err != nil {
		return nil, nil, err
	}
	lease, holder, err := st.Acquire(ctx, *r.Key, claim)
	if err != nil {
		return nil, nil, r.notAcquired(ctx, err, func() *store.Holder {
			s, serr := st.Status(context.Background(), *r.Key)
			if serr != nil || s == nil {
				return nil
			}
			return s.Holder
		})
	}
	if lease == nil {
		return nil, nil, fail(r.ConflictExit, "key %s is busy: %s", *r.Key, describe(holder))
	}
	env = append(env, "FENCERUN_KEY="+*r.Key, "FENCERUN_FENCE="+strconv.FormatUint(lease.Fence(), 10))
	return lease, append(env, lease.Env()...), nil
}

// notAcquired maps a failed acquisition to its exit: 128+N for a signal,
// the conflict code when --wait ran out, 125 for anything else.
func (r *RunCmd) notAcquired(ctx context.Context, err error, holder func() *store.Holder) error {
	var sig signalled
	if errors.As(err, &sig) {
		return sig
	}
	if errors.Is(err, errGaveUp) || errors.Is(err, context.DeadlineExceeded) {
		return fail(r.ConflictExit, "gave up waiting after %v: %s", r.wait(), describe(holder()))
	}
	if ctx.Err() != nil {
		if c := context.Cause(ctx); errors.As(c, &sig) {
			return sig
		}
	}
	return fail(supervisor.ExitFailed, "%v", err)
}

// supervise runs the command under the keeper as one run group and returns
// fencerun's exit code. The group's actors: the command (first stopping a
// dead predecessor's leftovers), the keeper, signals, the watchdog, ticks
// and the timeout. When one ends, the others are interrupted; the keeper
// and signal forwarding go on until the command's tree is gone, so a fence
// that breaks while the command is being stopped still cuts its grace
// short (S3, S5).
func (r *RunCmd) supervise(ctx context.Context, log hclog.Logger, lease store.Lease, keeper *fence.Keeper,
	ticks *fence.TickServer, env []string, marker string, stopSig syscall.Signal, sigs <-chan os.Signal) (int, error) {
	// mu orders the command's start against every decision to stop it: a
	// command is started only if nothing has asked to stop it yet, and one
	// that has started is stopped by whoever asks.
	var (
		mu          sync.Mutex
		proc        *supervisor.Process
		interrupted bool
		stopBy      time.Duration // set by a broken fence: the tree must be dead by then
		status      supervisor.Status
		keeperErr   error
	)
	clock := fence.BootClock{}
	graceLocked := func() time.Duration {
		if stopBy != 0 {
			return max(0, min(r.Grace, stopBy-clock.Now()))
		}
		return r.Grace
	}
	// stop asks for the command to be stopped, now or as soon as it starts.
	stop := func(by time.Duration) {
		mu.Lock()
		interrupted = true
		if by != 0 && (stopBy == 0 || by < stopBy) {
			stopBy = by
		}
		p, grace := proc, graceLocked()
		mu.Unlock()
		if p != nil {
			p.Stop(grace)
		}
	}
	started := make(chan struct{})  // the command runs
	treeGone := make(chan struct{}) // the command's tree is gone, or it never started

	var g run.Group
	{ // the command: ends when it exited and its tree is gone
		g.Add(func() error {
			defer close(treeGone)
			if err := stopLeftovers(ctx, lease, stopSig, r.Grace, log); err != nil {
				return err
			}
			mu.Lock()
			if interrupted {
				mu.Unlock()
				return nil
			}
			p, err := supervisor.Start(supervisor.Config{
				Argv: r.Command, Env: env, Marker: marker,
				StopSignal: stopSig, Grace: r.Grace, Logger: log.Named("supervisor"),
				Cgroup: r.cgroup, Clock: clock,
			})
			proc = p
			mu.Unlock()
			if err != nil {
				var ee *supervisor.ExecError
				if errors.As(err, &ee) {
					return fail(ee.Code(), "%v", err)
				}
				return fail(supervisor.ExitFailed, "%v", err)
			}
			close(started)
			log.Debug("command started", "pid", p.Pid(), "argv", r.Command)
			if err := lease.SetCommand(ctx, p.Group(), supervisor.OwnSession()); err != nil {
				log.Warn("could not record the command's process group", "error", err)
			}
			status = p.Wait()
			return nil
		}, func(error) { stop(0) })
	}
	{ // the keeper: ends when the lease is lost; renews until the tree is gone
		g.Add(func() error {
			keeperErr = keeper.Run(ctx)
			var end *fence.EndError
			if errors.As(keeperErr, &end) && end.StopBy != 0 {
				stop(end.StopBy) // the tree must be dead before the lease can expire (S3)
			}
			return keeperErr
		}, func(error) { go func() { <-treeGone; keeper.Interrupt() }() })
	}
	{ // requests to the holder: cancel, handover
		done := make(chan struct{})
		g.Add(func() error {
			select {
			case reason := <-keeper.Requests():
				return &fence.EndError{Reason: reason}
			case <-done:
				return nil
			}
		}, func(error) { close(done) })
	}
	{ // signals: forwarded to the command's group; the command decides
		done := make(chan struct{})
		g.Add(func() error {
			for {
				select {
				case s := <-sigs:
					mu.Lock()
					p := proc
					if p == nil && s != syscall.SIGWINCH {
						// Before the command started: as a signal while waiting.
						interrupted = true
						mu.Unlock()
						return signalled{s.(syscall.Signal)}
					}
					mu.Unlock()
					if p == nil {
						continue
					}
					log.Debug("forwarding signal", "signal", s)
					_ = p.Signal(s.(syscall.Signal))
				case <-done:
					return nil
				}
			}
		}, func(error) { go func() { <-treeGone; close(done) }() })
	}
	var watchdog *fence.Watchdog
	if after := r.stuckAfter(); after > 0 {
		watchdog, _ = fence.NewWatchdog(after, nil)
		g.Add(func() error { return watchdog.Run(ctx) }, func(error) { watchdog.Interrupt() })
	}
	{ // ticks from the command: stamped by the keeper, fed to the watchdog
		owns := func(pid int) bool {
			mu.Lock()
			p := proc
			mu.Unlock()
			return p != nil && p.Owns(pid)
		}
		g.Add(func() error {
			return ticks.Serve(owns, func(t time.Time) {
				keeper.Tick(t)
				if watchdog != nil {
					watchdog.Tick()
				}
			})
		}, func(error) { go func() { <-treeGone; ticks.Close() }() }) // a command that is stopping may still tick
	}
	if r.Timeout > 0 { // --timeout counts from the command's start
		done := make(chan struct{})
		g.Add(func() error {
			select {
			case <-started:
			case <-done:
				return nil
			}
			t := time.NewTimer(r.Timeout)
			defer t.Stop()
			select {
			case <-t.C:
				return errTimeout
			case <-done:
				return nil
			}
		}, func(error) { close(done) })
	}

	err := g.Run()
	var (
		cause supervisor.Cause
		end   *fence.EndError
		sig   signalled
		coded *exitError
	)
	switch {
	case errors.As(err, &sig), errors.As(err, &coded):
		return 0, err
	case errors.Is(err, errTimeout):
		cause = supervisor.CauseTimeout
		log.Warn("the command ran past --timeout and was stopped", "timeout", r.Timeout)
	case errors.As(err, &end):
		cause = causeOf[end.Reason]
	case err != nil:
		// A part of fencerun itself failed (a timer, the tick socket): the
		// command was stopped for it, so its status is not the answer.
		return 0, fail(supervisor.ExitFailed, "%v", err)
	}
	if errors.As(keeperErr, &end) && end.Reason == fence.Lost {
		cause = supervisor.CauseLost // also when it broke while the command was being stopped
	}
	if end != nil {
		level := hclog.Warn
		if end.Reason == fence.Lost {
			level = hclog.Error
		}
		log.Log(level, "the command was stopped", "reason", end.Reason.String(), "detail", end.Error())
	}
	return supervisor.ExitCode(cause, status), nil
}

// stopLeftovers stops what dead predecessors left running (S2), so that
// nothing of their trees runs beside this holder's command, and then tells
// the store they are gone. It runs to the end, whatever else happens
// meanwhile: those processes are not ours to abandon. Until it succeeds the
// store keeps them for the next holder.
func stopLeftovers(ctx context.Context, lease store.Lease, sig syscall.Signal, grace time.Duration, log hclog.Logger) error {
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
	_, elsewhere, err := supervisor.StopTrees(ctx, trees, supervisor.StopConfig{StopSignal: sig, Grace: grace, Logger: log.Named("supervisor")})
	if err != nil {
		return fail(supervisor.ExitFailed, "%v", err)
	}
	if elsewhere {
		// Only a fencerun on that host can stop them (SPEC E5): they stay
		// recorded for it.
		log.Warn("a dead holder's leftovers run on another host; they are left to a fencerun there")
		return nil
	}
	if err := lease.LeftoversStopped(ctx); err != nil {
		log.Warn("could not record that the leftovers are gone; the next holder will look again", "error", err)
	}
	return nil
}

var causeOf = map[fence.Reason]supervisor.Cause{
	fence.Lost: supervisor.CauseLost, fence.Cancelled: supervisor.CauseCancel,
	fence.Handover: supervisor.CauseHandover, fence.Stuck: supervisor.CauseStuck,
}

// wait is how long to wait for the lease: -n and -w 0 not at all; keys
// forever unless -w says otherwise, residents not unless -w says so (R8: a
// standby is a decision to state).
func (r *RunCmd) wait() duration.Wait {
	switch {
	case r.NoWait:
		return duration.Wait{}
	case r.Wait != nil:
		return *r.Wait
	case r.Resident != "":
		return duration.Wait{}
	}
	return duration.Forever
}

func (r *RunCmd) stuckAfter() time.Duration {
	if r.StuckAfter != nil {
		return *r.StuckAfter
	}
	if r.Resident != "" {
		return resident.DefaultStuckAfter
	}
	return 0
}

// describe names a holder for an error message; never its token.
func describe(h *store.Holder) string {
	if h == nil {
		return "held by another process"
	}
	s := fmt.Sprintf("held by %s (pid %d on %s", store.Printable(h.Name), h.PID, store.Printable(h.Host))
	if !h.Acquired.IsZero() {
		s += ", since " + h.Acquired.Format(time.RFC3339)
	}
	if h.Reason != "" {
		s += ", reason: " + store.Printable(h.Reason)
	}
	return s + ")"
}

// withoutFencerunVars drops what an outer fencerun gave this process, so
// the command sees only this run's FENCERUN_* values.
func withoutFencerunVars(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "FENCERUN_KEY", "FENCERUN_RESIDENT", "FENCERUN_FENCE", "FENCERUN_TICK", "ETCD_LOCK_KEY", "ETCD_LOCK_REV":
			continue
		}
		out = append(out, kv)
	}
	return out
}

func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal number %d out of range", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
