package fenced_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// fakeLease is a store.Lease whose Check answers the test scripts; its
// renewals always succeed.
type fakeLease struct {
	clock    *boottime.Fake
	ttl      time.Duration
	pred     *store.Holder
	slot     int
	changes  chan struct{}
	checks   chan error    // Check's answers: nil is l.request
	request  store.Request // what a nil answer asks: a cancel unless set
	ticks    chan time.Time
	pids     chan int                     // SetCommand's group, once the command runs
	stopped  atomic.Bool                  // LeftoversStopped was called
	released chan struct{}                // closed by Release
	procGone func() bool                  // reports, at Release, whether the command's tree is gone
	gone     atomic.Bool                  // what procGone said
	recorded chan struct{}                // if not nil, SetCommand waits until it is closed (a store that hangs)
	hang     chan struct{}                // if not nil, Renew waits until it is closed (renewals that stopped)
	marked   string                       // the ID ReleaseDone marked, read once released is closed
	markErr  error                        // what ReleaseDone returns
	ending   atomic.Pointer[store.Ending] // what Ended said
}

func newFakeLease(clock *boottime.Fake, ttl time.Duration) *fakeLease {
	return &fakeLease{clock: clock, ttl: ttl, request: store.RequestCancel, changes: make(chan struct{}, 1),
		checks: make(chan error, 1), ticks: make(chan time.Time, 16), pids: make(chan int, 1), released: make(chan struct{})}
}

func (l *fakeLease) Key() string                            { return "k" }
func (l *fakeLease) Fence() uint64                          { return 7 }
func (l *fakeLease) Term() store.Term                       { return store.Term{Start: l.clock.Now(), TTL: l.ttl} }
func (l *fakeLease) Env() []string                          { return nil }
func (l *fakeLease) Predecessor() *store.Holder             { return l.pred }
func (l *fakeLease) Slot() int                              { return l.slot }
func (l *fakeLease) LeftoversStopped(context.Context) error { l.stopped.Store(true); return nil }
func (l *fakeLease) SetCommand(_ context.Context, group, _ store.ProcessID) error {
	l.pids <- group.ID
	if l.recorded != nil {
		<-l.recorded
	}
	return nil
}
func (l *fakeLease) Ended(e store.Ending)                      { l.ending.Store(&e) }
func (l *fakeLease) Changes() <-chan struct{}                  { return l.changes }
func (l *fakeLease) Tick(_ context.Context, t time.Time) error { l.ticks <- t; return nil }
func (l *fakeLease) Renew(context.Context) (store.Term, error) {
	if l.hang != nil {
		<-l.hang
	}
	return l.Term(), nil
}
func (l *fakeLease) Check(ctx context.Context) (store.Request, error) {
	select {
	case err := <-l.checks:
		if err == nil {
			return l.request, nil
		}
		return store.RequestNone, err
	case <-ctx.Done():
		return store.RequestNone, ctx.Err()
	}
}
func (l *fakeLease) ReleaseDone(ctx context.Context, id string) error {
	if l.markErr == nil {
		l.marked = id
	}
	_ = l.Release(ctx)
	return l.markErr
}
func (l *fakeLease) Release(context.Context) error {
	if l.procGone != nil {
		l.gone.Store(l.procGone())
	}
	close(l.released)
	return nil
}

// change tells the holder its record changed; err is what Check finds
// (nil: a cancel request).
func (l *fakeLease) change(err error) {
	l.checks <- err
	l.changes <- struct{}{}
}

// fakeProc is a command that runs until the test ends it.
type fakeProc struct {
	stops  chan time.Duration // each Stop's grace
	sigs   chan syscall.Signal
	exit   chan supervisor.Status
	exited atomic.Bool
}

func newFakeProc() *fakeProc {
	return &fakeProc{stops: make(chan time.Duration, 8), sigs: make(chan syscall.Signal, 8),
		exit: make(chan supervisor.Status, 1)}
}

func (p *fakeProc) Pid() int                        { return 4242 }
func (p *fakeProc) Stop(grace time.Duration)        { p.stops <- grace }
func (p *fakeProc) Signal(sig syscall.Signal) error { p.sigs <- sig; return nil }
func (p *fakeProc) Owns(pid int) bool               { return pid == 4242 }
func (p *fakeProc) JobControl(done <-chan struct{}, _ supervisor.Keeper, forward <-chan os.Signal, ends func(os.Signal) error) error {
	for {
		select {
		case s := <-forward:
			if err := ends(s); err != nil {
				return err
			}
			p.Signal(s.(syscall.Signal))
		case <-done:
			return nil
		}
	}
}
func (p *fakeProc) Group() store.ProcessID { return store.ProcessID{ID: 4242, Start: 1} }
func (p *fakeProc) Wait() supervisor.Status {
	s := <-p.exit
	p.exited.Store(true)
	return s
}

// harness is one fenced.Run with fakes all round, run in the background.
type harness struct {
	cfg     fenced.Config
	clock   *boottime.Fake
	lease   *fakeLease
	proc    *fakeProc
	signals chan os.Signal
	started chan struct{} // closed when Start is called
	out     chan fenced.Outcome
}

const (
	ttl   = 30 * time.Second // longer than any test moves the clock
	grace = 10 * time.Second
	epoch = time.Hour // the fake clock's start
)

func newHarness() *harness {
	clock := boottime.NewFake(epoch)
	h := &harness{clock: clock, lease: newFakeLease(clock, ttl), proc: newFakeProc(),
		signals: make(chan os.Signal, 8), started: make(chan struct{}), out: make(chan fenced.Outcome, 1)}
	h.lease.procGone = h.proc.exited.Load
	h.cfg = fenced.Config{
		Acquire: func(context.Context) (store.Lease, error) { return h.lease, nil },
		Start: func(store.Lease) (fenced.Process, error) {
			close(h.started)
			return h.proc, nil
		},
		StopLeftovers: func(context.Context, []store.Leftover) ([]store.Leftover, error) { return nil, nil },
		Signals:       h.signals,
		TTL:           ttl, Grace: grace, Clock: clock,
	}
	return h
}

// withTTL gives the lease a TTL shorter than the grace, so that a broken
// fence must cut the grace short.
func (h *harness) withTTL(ttl time.Duration) *harness {
	h.cfg.TTL, h.lease.ttl = ttl, ttl
	return h
}

func (h *harness) run() *harness {
	go func() { h.out <- fenced.Run(context.Background(), h.cfg) }()
	return h
}

// outcome waits for the run to end and checks that it released, after
// the command's tree was gone if it started.
func (h *harness) outcome(t *testing.T) fenced.Outcome {
	t.Helper()
	o := testsupport.Recv(t, h.out, "the run to end")
	select {
	case <-h.lease.released:
	default:
		t.Fatal("the run ended without releasing the lease (S8)")
	}
	select {
	case <-h.started:
		if !h.lease.gone.Load() {
			t.Error("the lease was released before the command's tree was gone (S2)")
		}
	default:
	}
	return o
}

// notStarted checks, once the run ended, that the command never started.
func (h *harness) notStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
		t.Error("the command was started")
	default:
	}
}

func TestExitedByItself(t *testing.T) {
	h := newHarness().run()
	testsupport.Recv(t, h.started, "the start")
	h.proc.exit <- supervisor.Status{Code: 3}
	o := h.outcome(t)
	if o.End != fenced.Exited || o.Status.Code != 3 {
		t.Fatalf("outcome = %+v, want Exited with code 3", o)
	}
}

// A fence that breaks while a cancel's grace runs cuts the grace short, so
// that the tree is dead before the lease can expire (S3), and the run ends
// as a broken fence (S5), not as the cancel that began the stop.
func TestFenceBreaksDuringCancelGrace(t *testing.T) {
	const ttl = 3 * time.Second
	h := newHarness().withTTL(ttl)
	h.run()
	testsupport.Recv(t, h.started, "the start")
	h.lease.change(nil) // a cancel request
	if g := testsupport.Recv(t, h.proc.stops, "the cancel's stop"); g != grace {
		t.Fatalf("cancel stopped with grace %v, want the full %v", g, grace)
	}
	h.lease.change(fmt.Errorf("revoked: %w", store.ErrLost))
	// The keeper gives a StopBy of the lease's expiry less its margin,
	// min(TTL/10, 500ms); the clock has not moved since the acquisition.
	want := ttl - min(ttl/10, 500*time.Millisecond)
	if g := testsupport.Recv(t, h.proc.stops, "the broken fence's stop"); g != want {
		t.Fatalf("broken fence stopped with grace %v, want %v (dead before expiry)", g, want)
	}
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
	if o := h.outcome(t); o.End != fenced.FenceBroken {
		t.Fatalf("outcome = %+v, want FenceBroken", o)
	}
}

// A store that hangs while the command's group is recorded (a guard lock
// someone else holds, a wedged disk, a silent server) never keeps a broken
// fence from stopping the command: the tree must still be dead before the
// lease can expire (S3).
func TestFenceBreaksWhileTheCommandIsRecorded(t *testing.T) {
	const ttl = 3 * time.Second
	h := newHarness().withTTL(ttl)
	h.lease.recorded = make(chan struct{})
	h.run()
	testsupport.Recv(t, h.lease.pids, "the command's group being recorded")
	h.lease.change(fmt.Errorf("revoked: %w", store.ErrLost))
	want := ttl - min(ttl/10, 500*time.Millisecond)
	if g := testsupport.Recv(t, h.proc.stops, "the broken fence's stop while the store hangs"); g != want {
		t.Fatalf("broken fence stopped with grace %v, want %v (dead before expiry)", g, want)
	}
	close(h.lease.recorded)
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
	if o := h.outcome(t); o.End != fenced.FenceBroken {
		t.Fatalf("outcome = %+v, want FenceBroken", o)
	}
}

// A signal while the lease is being taken ends the wait; no command starts.
func TestSignalWhileAcquiring(t *testing.T) {
	h := newHarness()
	waiting := make(chan struct{})
	h.cfg.Acquire = func(ctx context.Context) (store.Lease, error) {
		close(waiting)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	h.run()
	testsupport.Recv(t, waiting, "the wait")
	h.signals <- syscall.SIGWINCH // a resized terminal ends nothing
	h.signals <- syscall.SIGINT
	o := testsupport.Recv(t, h.out, "the run to end")
	if o.End != fenced.Interrupted || o.Signal != syscall.SIGINT {
		t.Fatalf("outcome = %+v, want Interrupted by SIGINT", o)
	}
	h.notStarted(t)
}

// A signal after the lease is held but before the command started (while a
// dead predecessor's leftovers are stopped) starts no command either; the
// leftovers are still stopped to the end and the lease released.
func TestSignalBeforeStart(t *testing.T) {
	h := newHarness()
	h.lease.pred = &store.Holder{PID: 99, Marker: "FENCERUN_TICK=@old"}
	stopping, finish := make(chan string), make(chan struct{})
	h.cfg.StopLeftovers = func(_ context.Context, trees []store.Leftover) ([]store.Leftover, error) {
		for _, t := range trees {
			stopping <- t.Marker
		}
		<-finish
		return nil, nil
	}
	h.run()
	if m := testsupport.Recv(t, stopping, "the leftovers' stop"); m != "FENCERUN_TICK=@old" {
		t.Fatalf("stopped leftovers of %q, want the predecessor's marker", m)
	}
	h.signals <- syscall.SIGTERM
	close(finish)
	o := h.outcome(t)
	if o.End != fenced.Interrupted || o.Signal != syscall.SIGTERM {
		t.Fatalf("outcome = %+v, want Interrupted by SIGTERM", o)
	}
	h.notStarted(t)
	if !h.lease.stopped.Load() {
		t.Error("the leftovers were stopped but not recorded as gone")
	}
}

// Once the command runs, signals are forwarded to it and it decides.
func TestSignalsForwarded(t *testing.T) {
	h := newHarness().run()
	testsupport.Recv(t, h.started, "the start")
	h.signals <- syscall.SIGUSR1
	if s := testsupport.Recv(t, h.proc.sigs, "the forwarded signal"); s != syscall.SIGUSR1 {
		t.Fatalf("forwarded %v, want SIGUSR1", s)
	}
	h.proc.exit <- supervisor.Status{Code: 0}
	if o := h.outcome(t); o.End != fenced.Exited {
		t.Fatalf("outcome = %+v, want Exited", o)
	}
}

// S7: a fatal signal while the command runs is not forwarded: the tree is
// stopped with the grace and the run ends Killed by it, whatever the
// command's own status.
func TestFatalSignalStopsTheTree(t *testing.T) {
	h := newHarness().run()
	testsupport.Recv(t, h.started, "the start")
	h.signals <- syscall.SIGABRT
	if g := testsupport.Recv(t, h.proc.stops, "the stop"); g != grace {
		t.Fatalf("stopped with grace %v, want %v", g, grace)
	}
	h.proc.exit <- supervisor.Status{Code: 0}
	if o := h.outcome(t); o.End != fenced.Killed || o.Signal != syscall.SIGABRT {
		t.Fatalf("outcome = %+v, want Killed by SIGABRT", o)
	}
	select {
	case s := <-h.proc.sigs:
		t.Errorf("forwarded %v to the command", s)
	default:
	}
}

// --timeout counts from the start on the injected clock.
func TestTimeout(t *testing.T) {
	h := newHarness()
	h.cfg.Timeout = 5 * time.Second
	h.run()
	testsupport.Recv(t, h.started, "the start")
	h.clock.WaitArmed(epoch + 5*time.Second)
	h.clock.Advance(5 * time.Second)
	if g := testsupport.Recv(t, h.proc.stops, "the timeout's stop"); g != grace {
		t.Fatalf("timeout stopped with grace %v, want %v", g, grace)
	}
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
	if o := h.outcome(t); o.End != fenced.TimedOut {
		t.Fatalf("outcome = %+v, want TimedOut", o)
	}
}

// A timeout that runs out while the command is being stopped for a cancel
// changes nothing: the run ends as the cancel, stopped once.
func TestTimeoutDuringStop(t *testing.T) {
	h := newHarness()
	h.cfg.Timeout = 5 * time.Second
	h.run()
	testsupport.Recv(t, h.started, "the start")
	h.clock.WaitArmed(epoch + 5*time.Second) // the timeout is counting
	h.lease.change(nil)
	testsupport.Recv(t, h.proc.stops, "the cancel's stop")
	h.clock.Advance(5 * time.Second)
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
	if o := h.outcome(t); o.End != fenced.Cancelled {
		t.Fatalf("outcome = %+v, want Cancelled", o)
	}
	select {
	case g := <-h.proc.stops:
		t.Errorf("stopped again (grace %v) after the cancel's stop", g)
	default:
	}
}

// A fence that breaks during a timeout's stop still cuts its grace short
// and wins the outcome.
func TestFenceBreaksDuringTimeoutStop(t *testing.T) {
	const ttl, timeout = 3 * time.Second, 500 * time.Millisecond
	h := newHarness().withTTL(ttl)
	h.cfg.Timeout = timeout
	h.run()
	testsupport.Recv(t, h.started, "the start")
	h.clock.WaitArmed(epoch + timeout)
	h.clock.Advance(timeout)
	testsupport.Recv(t, h.proc.stops, "the timeout's stop")
	h.lease.change(store.ErrLost)
	want := ttl - min(ttl/10, 500*time.Millisecond) - timeout
	if g := testsupport.Recv(t, h.proc.stops, "the broken fence's stop"); g != want {
		t.Fatalf("broken fence stopped with grace %v, want %v (dead before expiry)", g, want)
	}
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGKILL}
	if o := h.outcome(t); o.End != fenced.FenceBroken {
		t.Fatalf("outcome = %+v, want FenceBroken", o)
	}
}

func TestNotStarted(t *testing.T) {
	h := newHarness()
	notFound := errors.New("no such command")
	h.cfg.Start = func(store.Lease) (fenced.Process, error) { return nil, notFound }
	h.lease.checks <- nil // the lease is still held when the start fails
	h.run()
	o := h.outcome(t)
	if o.End != fenced.NotStarted || !errors.Is(o.Err, notFound) {
		t.Fatalf("outcome = %+v, want NotStarted with the start's error", o)
	}
}

// A start that fails after the lease was lost (release --force between the
// take and the start) ends as a broken fence (76), not as a command that
// could not run (126/127): the failure may be the loss's effect.
func TestStartFailsAfterTheLeaseWasLost(t *testing.T) {
	h := newHarness()
	gone := errors.New("fork/exec /usr/bin/sh: no such file or directory")
	h.cfg.Start = func(store.Lease) (fenced.Process, error) { return nil, gone }
	h.lease.checks <- fmt.Errorf("revoked: %w", store.ErrLost)
	h.run()
	o := h.outcome(t)
	if o.End != fenced.FenceBroken {
		t.Fatalf("outcome = %+v, want FenceBroken", o)
	}
}

func TestNotAcquired(t *testing.T) {
	h := newHarness()
	h.cfg.Acquire = func(context.Context) (store.Lease, error) {
		return nil, fenced.NotAcquiredf("key k is busy")
	}
	got := testsupport.Recv(t, h.run().out, "the run to end")
	if got.End != fenced.NotAcquired || got.Err.Error() != "key k is busy" {
		t.Fatalf("outcome = %+v, want NotAcquired saying only why", got)
	}
	h.notStarted(t)
}

// A failing leftovers' stop is fencerun's failure; the command never runs
// beside leftovers it could not stop.
func TestLeftoversFail(t *testing.T) {
	h := newHarness()
	h.lease.pred = &store.Holder{PID: 99, Leftovers: []store.Leftover{{Marker: "a"}, {Marker: "b"}}}
	h.cfg.StopLeftovers = func(context.Context, []store.Leftover) ([]store.Leftover, error) {
		return nil, errors.New("not ours")
	}
	o := h.run().outcome(t)
	if o.End != fenced.Failed || o.Err == nil {
		t.Fatalf("outcome = %+v, want Failed", o)
	}
	h.notStarted(t)
	if h.lease.stopped.Load() {
		t.Error("leftovers recorded as gone though one tree could not be stopped")
	}
}

// Ticks from the command's tree are stamped by the keeper and keep the
// watchdog quiet; silence after a tick is stuck (R7).
func TestTicksAndStuck(t *testing.T) {
	h := newHarness()
	h.cfg.StuckAfter = 2 * time.Second
	srv := &fakeTicks{closed: make(chan struct{}), serving: make(chan func(int) bool, 1), onTick: make(chan func(time.Time), 1)}
	h.cfg.Ticks = srv
	h.run()
	testsupport.Recv(t, h.started, "the start")
	owns := testsupport.Recv(t, srv.serving, "the tick server")
	tick := testsupport.Recv(t, srv.onTick, "the tick callback")
	if pid := testsupport.Recv(t, h.lease.pids, "the command's pid for status"); pid != 4242 {
		t.Fatalf("recorded command pid %d, want 4242", pid)
	}
	if owns(1) || !owns(4242) {
		t.Fatal("ticks taken from outside the command's tree, or refused from inside it")
	}
	at := time.Unix(1700000000, 0)
	tick(at)
	if got := testsupport.Recv(t, h.lease.ticks, "the stamped tick"); !got.Equal(at) {
		t.Fatalf("stamped %v, want %v", got, at)
	}
	h.clock.WaitArmed(epoch + 2*time.Second)
	h.clock.Advance(2 * time.Second)
	testsupport.Recv(t, h.proc.stops, "the watchdog's stop")
	select {
	case <-srv.closed:
		t.Fatal("the tick server closed while the command was still stopping")
	default:
	}
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
	if o := h.outcome(t); o.End != fenced.Stuck {
		t.Fatalf("outcome = %+v, want Stuck", o)
	}
	testsupport.Recv(t, srv.closed, "the tick server's close")
}

type fakeTicks struct {
	closed  chan struct{}
	serving chan func(int) bool
	onTick  chan func(time.Time)
}

func (f *fakeTicks) Serve(owns func(int) bool, _ <-chan struct{}, onTick func(time.Time)) error {
	f.serving <- owns
	f.onTick <- onTick
	<-f.closed
	return nil
}

func (f *fakeTicks) Close() error { close(f.closed); return nil }

// Leftovers on another host are left to a fencerun there, and do not
// keep this host's stopped ones from being recorded gone: the lease is
// told (LeftoversStopped forgets this host's only), and the command
// starts.
func TestLeftoversElsewhere(t *testing.T) {
	h := newHarness()
	elsewhere := store.Leftover{Host: "elsewhere", Marker: "m"}
	h.lease.pred = &store.Holder{PID: 99, Leftovers: []store.Leftover{elsewhere, {Marker: "here"}}}
	h.cfg.StopLeftovers = func(context.Context, []store.Leftover) ([]store.Leftover, error) {
		return []store.Leftover{elsewhere}, nil
	}
	h.run()
	testsupport.Recv(t, h.started, "the start")
	h.proc.exit <- supervisor.Status{}
	if o := h.outcome(t); o.End != fenced.Exited {
		t.Fatalf("outcome = %+v, want Exited", o)
	}
	if !h.lease.stopped.Load() {
		t.Error("this host's leftovers not recorded as gone beside another host's")
	}
}

// A handover request stops the command with its full grace and ends the
// run as handed over (R5).
func TestHandover(t *testing.T) {
	h := newHarness()
	h.lease.request = store.RequestHandover
	h.run()
	testsupport.Recv(t, h.started, "the start")
	h.lease.change(nil)
	if g := testsupport.Recv(t, h.proc.stops, "the handover's stop"); g != grace {
		t.Fatalf("handover stopped with grace %v, want %v", g, grace)
	}
	h.proc.exit <- supervisor.Status{Code: 0}
	if o := h.outcome(t); o.End != fenced.HandedOver {
		t.Fatalf("outcome = %+v, want HandedOver", o)
	}
}

// While the command is being stopped, signals still reach it: the signals
// actor goes on until the tree is gone.
func TestSignalsForwardedWhileStopping(t *testing.T) {
	h := newHarness().run()
	testsupport.Recv(t, h.started, "the start")
	h.lease.change(nil)
	testsupport.Recv(t, h.proc.stops, "the cancel's stop")
	h.signals <- syscall.SIGINT
	if s := testsupport.Recv(t, h.proc.sigs, "the signal forwarded during the stop"); s != syscall.SIGINT {
		t.Fatalf("forwarded %v, want SIGINT", s)
	}
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGINT}
	if o := h.outcome(t); o.End != fenced.Cancelled {
		t.Fatalf("outcome = %+v, want Cancelled", o)
	}
}

// A lease that the store hands over at the very moment a signal ends the
// wait is given back, after its predecessor's leftovers are stopped, and
// no command starts (S7, S8).
func TestSignalAsTheLeaseIsTaken(t *testing.T) {
	h := newHarness()
	h.lease.pred = &store.Holder{PID: 99, Marker: "m"}
	stopped := make(chan struct{}, 1)
	h.cfg.StopLeftovers = func(context.Context, []store.Leftover) ([]store.Leftover, error) {
		stopped <- struct{}{}
		return nil, nil
	}
	waiting := make(chan struct{})
	h.cfg.Acquire = func(ctx context.Context) (store.Lease, error) {
		close(waiting)
		<-ctx.Done()
		return h.lease, nil // taken all the same, as the wait ended
	}
	h.run()
	testsupport.Recv(t, waiting, "the wait")
	h.signals <- syscall.SIGHUP
	o := h.outcome(t)
	if o.End != fenced.Interrupted || o.Signal != syscall.SIGHUP {
		t.Fatalf("outcome = %+v, want Interrupted by SIGHUP", o)
	}
	testsupport.Recv(t, stopped, "the leftovers' stop")
	h.notStarted(t)
}
