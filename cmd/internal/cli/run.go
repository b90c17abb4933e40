package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/cmd/internal/duration"
	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/ticksock"
	"github.com/fencerun/fencerun/resident"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// RunCmd is `fencerun run`.
type RunCmd struct {
	Key          *string        `placeholder:"KEY" predictor:"key" help:"Hold the keyed lease KEY: letters, digits and . _ - : /, starting with a letter or digit, at most 80 bytes."`
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
	Build        string         `placeholder:"PATH" help:"Resident: the file whose identity is the build, for interpreted workers (the script of python3 worker.py). Only a build of the same path can take the role over by handover."`
	Cgroup       string         `enum:"auto,require,off" default:"auto" help:"auto: run the command in a cgroup of its own where a writable cgroup v2 hierarchy exists (root, or a systemd-delegated subtree), so that its whole tree is found and killed exactly; require: exit 125 where none does; off: find the tree among fencerun's descendants."`
	Slots        int            `placeholder:"N" default:"1" help:"At most N holders of the key at once (1 to 1024), each in a slot of its own: the command gets FENCERUN_SLOT, 0 to N-1, the lowest free slot, never one a live holder has. Every holder and waiter of the key must give the same N (else exit 125). 1 is the exclusive hold, with FENCERUN_SLOT=0. Not with --shared."`
	Shared       bool           `short:"s" help:"A shared hold, as flock -s: any number of shared holders at once, never beside an exclusive one. Waiters are served in arrival order across both kinds: shared waiters in a row start together, and one behind a waiting exclusive run waits for it. Not with --slots or --exclusive."`
	Exclusive    bool           `short:"x" help:"An exclusive hold, as flock -x: alone, with no other holder (the default). Not with --shared, nor with --slots N above 1."`
	Ready        string         `enum:"start,command" default:"start" help:"Under systemd's notify protocol (Type=notify, NOTIFY_SOCKET set): start says READY=1 once the command started under the lease; command leaves READY=1 to the command, which gets a NOTIFY_SOCKET of fencerun's and whose messages fencerun relays from its own pid (NotifyAccess=main works), MAINPID excepted. The status says the holder and position while waiting, the lease once held, and STOPPING=1 with the reason when the lease is lost. With WatchdogSec=, the watchdog is fed only while the lease is renewed (and, with command, as the command feeds it)."`
	Once         string         `placeholder:"ID" help:"Run the command to success at most once per key and ID, across every host and user sharing the store: a run that finds ID done exits 0 (see --once-exit) without running or waiting; only an exit 0 under the lease marks it done. The command gets FENCERUN_ONCE=ID."`
	OncePer      time.Duration  `placeholder:"D" help:"--once with the UTC start of the current period of D as the ID (floor(unix seconds / D) * D, in RFC 3339): for a cron entry on several hosts that must run once per period. A host whose clock is off by more than the cron jitter may compute a neighbouring period; give --once from the scheduler's time where that matters."`
	OnceExit     int            `placeholder:"N" default:"0" help:"Exit code of a run whose --once ID was done already."`

	Command []string `arg:"" optional:"" passthrough:"partial" help:"The command and its arguments, after --."`

	notified    *fenced.Notify // systemd's notify protocol, or nil (N1)
	relayAddr   string         // the command's NOTIFY_SOCKET (--ready command)
	saidWaiting string         // the waiting STATUS last sent

	conflictGiven bool   // -E typed or exported: a conflict is the caller's to report
	slotsGiven    bool   // --slots typed or exported: the command gets FENCERUN_SLOT
	waitedFor     string // what the wait was waiting for when a signal ended it
	onceFor       string // the run's --once ID (onceID at its start), or empty
	acquired      bool   // the lease was taken
}

// Validate checks the flags (B2) before anything touches the disk.
func (r *RunCmd) Validate(kctx *kong.Context) error {
	if len(r.Command) > 0 && r.Command[0] == "--" {
		r.Command = r.Command[1:] // kong's partial passthrough keeps the separator
	}
	r.conflictGiven = given(kctx, "conflict-exit-code")
	r.typedWaitWins(kctx)
	if err := r.validKind(kctx); err != nil {
		return err
	}
	switch {
	case typedTimes(kctx, "key") > 1:
		return usage("run takes one --key; it was given %d times", typedTimes(kctx, "key"))
	case typedTimes(kctx, "resident") > 1:
		return usage("run takes one --resident; it was given %d times", typedTimes(kctx, "resident"))
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
	if err := r.validResident(); err != nil {
		return err
	}
	if err := r.validOnce(kctx); err != nil {
		return err
	}
	if r.Key != nil {
		return validKey(*r.Key)
	}
	return nil
}

// typedWaitWins settles -n against --wait: what is typed beats what is
// exported, so FENCERUN_WAIT=10m in a profile does not break a cron line's
// -n. Typed together, or exported together, they contradict each other
// (Validate).
func (r *RunCmd) typedWaitWins(kctx *kong.Context) {
	if !r.NoWait || r.Wait == nil || r.Wait.None() {
		return
	}
	switch n, w := typed(kctx, "no-wait"), typed(kctx, "wait"); {
	case n && !w:
		r.Wait = nil
	case w && !n:
		r.NoWait = false
	}
}

// validKind checks --slots, --shared and --exclusive (M1, M2). As for -n
// and --wait, what is typed beats what is exported: FENCERUN_SHARED=1 in a
// profile does not break a line's -x, nor FENCERUN_SLOTS=4 its -s.
// Typed together, or exported together, they contradict each other
// (-x with --slots N > 1 too: the user asked for the key alone).
func (r *RunCmd) validKind(kctx *kong.Context) error {
	slots := given(kctx, "slots")
	if r.Shared && r.Exclusive {
		s, ok := typedOne(kctx, "shared", "exclusive")
		if !ok {
			return usage("--shared (-s) and --exclusive (-x) contradict each other: give one")
		}
		r.Shared, r.Exclusive = s, !s
	}
	if r.Shared && slots {
		s, ok := typedOne(kctx, "shared", "slots")
		if !ok {
			return usage("--shared and --slots cannot be combined: --slots N holds one of N slots, --shared any number of shared holds")
		}
		r.Shared, slots = s, !s
	}
	if r.Exclusive && slots && r.Slots > 1 {
		x, ok := typedOne(kctx, "exclusive", "slots")
		if !ok {
			return usage("--exclusive and --slots %d cannot be combined: --slots N holds one of N slots, --exclusive the key alone", r.Slots)
		}
		r.Exclusive, slots = x, !x
	}
	if !slots {
		r.Slots = 1
	}
	r.slotsGiven = slots
	switch {
	case r.Slots < 1 || r.Slots > store.MaxSlots:
		return usage("--slots %d is out of range: 1 to %d", r.Slots, store.MaxSlots)
	case r.Resident != "" && (r.Shared || r.Slots > 1):
		return usage("--shared and --slots are for keys: a resident role has one holder")
	}
	return nil
}

// validResident checks --resident and --build before anything touches the
// disk.
func (r *RunCmd) validResident() error {
	if r.Resident != "" {
		if err := validResident(r.Resident); err != nil {
			return err
		}
	}
	if r.Build != "" {
		if r.Resident == "" {
			return usage("--build names a resident's build; it goes with --resident")
		}
		if fi, err := os.Stat(r.Build); err != nil || !fi.Mode().IsRegular() {
			return usage("--build %s: not a regular file (%v)", r.Build, err)
		}
	}
	return nil
}

// typed reports whether the flag name was given on the command line rather
// than by its environment variable or default.
func typed(kctx *kong.Context, name string) bool { return typedTimes(kctx, name) > 0 }

// typedOne settles two flags given together: the one typed wins where
// only one was (aWins: a); both typed, or both exported, is no answer.
func typedOne(kctx *kong.Context, a, b string) (aWins, ok bool) {
	ta, tb := typed(kctx, a), typed(kctx, b)
	return ta, ta != tb
}

// typedTimes is how often the flag name was typed on the command line.
func typedTimes(kctx *kong.Context, name string) int {
	n := 0
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == name && !p.Resolved {
			n++
		}
	}
	return n
}

// given reports whether the flag name was typed or exported (its variable
// set), rather than left to its default.
func given(kctx *kong.Context, name string) bool {
	if typed(kctx, name) {
		return true
	}
	for _, f := range kctx.Flags() {
		if f.Name == name {
			for _, env := range f.Envs {
				if v, ok := os.LookupEnv(env); ok && v != "" {
					return true
				}
			}
		}
	}
	return false
}

// forwarded are the signals fencerun passes to the command's group (S7),
// but for SIGHUP and SIGINT when the caller ignored them (nohup, trap ”):
// left uncaught they stay ignored, for the command too, as SPEC.md's "What
// the command is given" asks.
var forwarded = func() []os.Signal {
	var sigs []os.Signal
	for _, s := range supervisor.Forwarded {
		if !supervisor.CallerIgnored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}()

// errGaveUp is the cause of a wait that --wait ended.
var errGaveUp = errors.New("gave up waiting")

// Run acquires the lease, runs the command under it and releases: the
// work is package fenced's; this is its wiring.
func (r *RunCmd) Run(ctx context.Context, g *Globals) error {
	// Every line of a run names its key or store (and, from the lease on,
	// its fence).
	log := g.log.With("key", deref(r.Key))
	r.onceFor = r.onceID(time.Now())
	if r.Resident != "" {
		log = g.log.With("store", r.Resident)
	}
	// Fail fast on a command that cannot run, before waiting in any queue,
	// with the PATH the command will get.
	path, err := supervisor.LookPath(r.Command[0], os.Environ())
	if err != nil {
		return notStarted(err)
	}
	// Signals are caught from here on, in this process's one subscription
	// (supervisor.Catch, which also catches SIGPIPE, so that a closed
	// stderr makes a log line fail rather than kill fencerun): one while
	// waiting ends the wait; the fatal ones too, so that none kills
	// fencerun with its tree left (S7). They stay caught until the process
	// exits, right after the run: one that comes once the run is over
	// changes nothing (its outcome is decided, the lease let go).
	sigs := supervisor.Catch(append(forwarded, fenced.Fatal...)...)

	ticks, err := g.listenTicks(g.log.Named("tick"))
	if err != nil {
		return err
	}
	defer ticks.Close()
	if r.notified, err = r.notify(g); err != nil {
		return err
	}
	if r.notified != nil && r.notified.Relay != nil {
		defer r.notified.Relay.Close()
	}
	clock := boottime.Kernel{}
	claim, err := r.claim(g, ticks.Addr(), clock)
	if err != nil {
		return err
	}
	out := fenced.Run(ctx, r.config(g, log, claim, path, sigs, ticks, clock))
	return r.exit(out)
}

// config is the run for package fenced: how to take the lease, start the
// command under it and stop what dead predecessors left.
func (r *RunCmd) config(g *Globals, log hclog.Logger, claim store.Claim, path string, sigs <-chan os.Signal, ticks fenced.Ticks, clock boottime.Clock) fenced.Config {
	stopSig, _ := parseSignal(r.KillSignal)
	return fenced.Config{
		Acquire: func(ctx context.Context) (store.Lease, error) { return r.acquire(ctx, g, log, claim, path) },
		// The command's cgroup is made here, once the lease that records
		// it is held, just before the start.
		Start: func(lease store.Lease) (fenced.Process, error) {
			prep := supervisor.Prepare(supervisor.Config{
				Argv: r.Command, Path: path, Marker: claim.Marker,
				StopSignal: stopSig, Grace: r.Grace, Cgroup: claim.Cgroup, Clock: clock,
			})
			return prep.Start(r.commandEnv(lease, claim.Marker), log.With("fence", lease.Fence()).Named("supervisor"))
		},
		StopLeftovers: func(ctx context.Context, trees []store.Leftover) ([]store.Leftover, error) {
			_, elsewhere, err := supervisor.StopTrees(ctx, trees, supervisor.StopConfig{StopSignal: stopSig, Grace: r.Grace, Logger: log.Named("supervisor"), Clock: clock})
			return elsewhere, err
		},
		Signals: sigs, Ticks: ticks, Notify: r.notified, Once: r.onceFor,
		TTL: r.TTL, Grace: r.Grace, Timeout: r.Timeout, StuckAfter: r.stuckAfter(),
		Clock: clock, Logger: log,
	}
}

// exit is runExit, with what only this run knows: whether -E chose what a
// conflict means, and what an interrupted wait was waiting for.
func (r *RunCmd) exit(out fenced.Outcome) error {
	err := runExit(out, r.ConflictExit, r.OnceExit)
	var expected *expectedError
	if errors.As(err, &expected) {
		switch {
		case out.End == fenced.NotAcquired:
			expected.silent = r.conflictGiven
		case out.End == fenced.Interrupted && !r.acquired && r.waitedFor != "":
			// Ctrl-C while waiting says what it was waiting for.
			expected.err = fmt.Errorf("%w while waiting for %s: %s", expected.err, r.what(), r.waitedFor)
		}
	}
	return err
}

// what the run waits for, in words.
func (r *RunCmd) what() string {
	if r.Resident != "" {
		return "the resident role of " + r.Resident
	}
	return deref(r.Key)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// claim says who asks for the lease, and in which cgroup its command will
// run (--cgroup).
func (r *RunCmd) claim(g *Globals, tickAddr string, clock boottime.Clock) (store.Claim, error) {
	claim := store.Claim{
		Name:   orDefault(r.Name, filepath.Base(r.Command[0])),
		Reason: r.Reason,
		TTL:    r.TTL,
		Wait:   !r.wait().None(),
		Marker: ticksock.Marker(tickAddr),
		Slots:  r.Slots,
		Shared: r.Shared,
		Clock:  clock.Now,
	}
	if r.Cgroup != "off" {
		h, err := supervisor.FindHierarchy()
		switch {
		case err == nil:
			claim.Cgroup = h.NewPath()
		case r.Cgroup == "require":
			return claim, fail(exitFailed, "--cgroup require: %v", err)
		default:
			g.log.Debug("no cgroup for the command; finding its tree among fencerun's descendants", "reason", err)
		}
	}
	return claim, nil
}

// acquire takes the lease or says why not, and what it waited for. A wait
// that --wait ended is a lease not acquired.
func (r *RunCmd) acquire(ctx context.Context, g *Globals, log hclog.Logger, claim store.Claim, path string) (store.Lease, error) {
	w := r.wait()
	report := &waitReport{what: r.what(), limit: w, log: log, term: stderrTerminal(g), start: time.Now()}
	if r.notified != nil {
		report.notify = r.waitStatus // a look every notifyLook, under systemd only
	}
	if !w.None() {
		var done func()
		ctx, done = report.interruptible(ctx, &r.waitedFor)
		defer done()
	}
	if !w.Forever() && !w.None() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, w.Limit(), errGaveUp)
		defer cancel()
	}
	var (
		lease store.Lease
		err   error
	)
	if r.Resident != "" {
		report.status = func(context.Context) (*store.Status, error) { return resident.Status(r.Resident) }
		if !w.None() {
			startWaitReport(report)
		}
		lease, err = r.acquireResident(ctx, g, claim, path, report)
	} else {
		var st store.Store
		if st, err = g.openStore(true); err != nil {
			return nil, err
		}
		report.status, report.logged = statusOf(st, *r.Key), true
		if !w.None() {
			startWaitReport(report)
		}
		if r.onceFor != "" {
			lease, err = r.acquireOnce(ctx, st, claim, report)
		} else {
			lease, err = r.acquireKey(ctx, st, claim, report)
		}
	}
	report.end()
	if lease != nil {
		r.acquired = true
		log.Info("acquired the lease", append([]any{"fence", lease.Fence(), "waited", report.waited()}, r.kindFields(lease)...)...)
	}
	return lease, err
}

// acquireKey takes the lease of --key from st; report is the wait's.
func (r *RunCmd) acquireKey(ctx context.Context, st store.Store, claim store.Claim, report *waitReport) (store.Lease, error) {
	lease, holder, err := st.Acquire(ctx, *r.Key, claim)
	if err != nil {
		return nil, r.notAcquired(err, report.gaveUpOn)
	}
	if lease == nil {
		return nil, fenced.NotAcquiredf("key %s is busy: %s", *r.Key, describe(holder))
	}
	return lease, nil
}

// notAcquired says why an acquisition failed: --wait ran out (the conflict
// code), or anything else (125).
func (r *RunCmd) notAcquired(err error, busy func() string) error {
	if errors.Is(err, errGaveUp) || errors.Is(err, context.DeadlineExceeded) {
		return fenced.NotAcquiredf("gave up waiting after %v: %s", r.wait(), busy())
	}
	return err
}

// commandEnv is the command's environment under lease (contract: what the
// command is given).
func (r *RunCmd) commandEnv(lease store.Lease, marker string) []string {
	env := r.notifyEnv(withoutFencerunVars(os.Environ()))
	if r.Resident != "" {
		env = append(env, "FENCERUN_RESIDENT="+lease.Key())
	} else {
		env = append(env, "FENCERUN_KEY="+lease.Key())
	}
	env = append(env, "FENCERUN_FENCE="+strconv.FormatUint(lease.Fence(), 10))
	if r.slotsGiven {
		env = append(env, "FENCERUN_SLOT="+strconv.Itoa(lease.Slot()))
	}
	if r.onceFor != "" {
		env = append(env, "FENCERUN_ONCE="+r.onceFor)
	}
	// The lease's own (ETCDCTL_ENDPOINTS, ...) replace what the command
	// would inherit under those names: a variable set twice reads as its
	// first.
	given := lease.Env()
	env = slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(given, func(g string) bool { return strings.HasPrefix(g, name+"=") })
	})
	return append(append(env, given...), marker)
}

// kindFields are the log fields that say how a run holds, beside its
// fence: its slot with --slots, shared for --shared; nothing for a plain
// exclusive run.
func (r *RunCmd) kindFields(lease store.Lease) []any {
	switch {
	case r.slotsGiven:
		return []any{"slot", lease.Slot()}
	case r.Shared:
		return []any{"kind", store.KindShared}
	}
	return nil
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
	var more []string
	if !h.Acquired.IsZero() {
		more = append(more, "since "+h.Acquired.Local().Format(time.RFC3339))
	}
	if h.Reason != "" {
		more = append(more, "reason: "+store.Printable(h.Reason))
	}
	return "held by " + who(h, more...)
}

// who names a holder or waiter as "name (pid N on host, more...)". A
// holder the store knows no process of (its record is missing, or its key
// directory was moved away) has no pid and host to show, and is named by
// its description alone, never as "pid 0 on".
func who(h *store.Holder, more ...string) string {
	if h.PID != 0 || h.Host != "" {
		more = append([]string{fmt.Sprintf("pid %d on %s", h.PID, store.Printable(h.Host))}, more...)
	}
	if len(more) == 0 {
		return store.Printable(h.Name)
	}
	return store.Printable(h.Name) + " (" + strings.Join(more, ", ") + ")"
}

// withoutFencerunVars drops what an outer fencerun gave this process, so
// the command sees only this run's FENCERUN_* values.
func withoutFencerunVars(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "FENCERUN_KEY", "FENCERUN_RESIDENT", "FENCERUN_FENCE", "FENCERUN_TICK", "FENCERUN_ONCE", "FENCERUN_SLOT", "ETCD_LOCK_KEY", "ETCD_LOCK_REV":
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
