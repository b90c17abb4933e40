package fence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// testLease is a store.Lease whose answers the test scripts. Renew blocks
// until the test answers on renewErr, so the test decides what each renewal
// returns and when.
type testLease struct {
	renews   chan struct{} // a renewal was sent
	renewErr chan error    // its answer
	changes  chan struct{}
	check    chan checkAnswer
	checkErr error        // when set, every Check fails with it at once
	checks   atomic.Int64 // Check calls
	ticks    chan time.Time
	released chan struct{}
	term     store.Term // of the acquisition
	granted  time.Duration
	pids     chan int
}

type checkAnswer struct {
	req store.Request
	err error
}

func newTestLease() *testLease {
	return &testLease{
		renews: make(chan struct{}, 16), renewErr: make(chan error),
		changes: make(chan struct{}, 1), check: make(chan checkAnswer, 1),
		ticks: make(chan time.Time, 16), released: make(chan struct{}, 1),
		pids: make(chan int, 1),
	}
}

func (l *testLease) Key() string                                     { return "k" }
func (l *testLease) Fence() uint64                                   { return 7 }
func (l *testLease) Env() []string                                   { return nil }
func (l *testLease) Predecessor() *store.Holder                      { return nil }
func (l *testLease) Slot() int                                       { return 0 }
func (l *testLease) LeftoversStopped(context.Context) error          { return nil }
func (l *testLease) Changes() <-chan struct{}                        { return l.changes }
func (l *testLease) Release(context.Context) error                   { l.released <- struct{}{}; return nil }
func (l *testLease) Ended(store.Ending)                              {}
func (l *testLease) ReleaseDone(ctx context.Context, _ string) error { return l.Release(ctx) }
func (l *testLease) Term() store.Term                                { return l.term }
func (l *testLease) SetCommand(_ context.Context, group, _ store.ProcessID) error {
	l.pids <- group.ID
	return nil
}

// Renew returns a Term without a Start (the keeper counts from the send
// time) and the TTL the test granted.
func (l *testLease) Renew(ctx context.Context) (store.Term, error) {
	l.renews <- struct{}{}
	select {
	case err := <-l.renewErr:
		return store.Term{TTL: l.granted}, err
	case <-ctx.Done():
		return store.Term{}, ctx.Err()
	}
}
func (l *testLease) Check(context.Context) (store.Request, error) {
	l.checks.Add(1)
	if l.checkErr != nil {
		return store.RequestNone, l.checkErr
	}
	a := <-l.check
	return a.req, a.err
}
func (l *testLease) Tick(_ context.Context, t time.Time) error { l.ticks <- t; return nil }

type run struct {
	k    *fence.Keeper
	clk  *boottime.Fake
	l    *testLease
	done chan error
}

func startKeeper(t *testing.T, ttl, grace time.Duration) *run {
	t.Helper()
	return startKeeperOn(t, newTestLease(), ttl, grace)
}

func startKeeperOn(t *testing.T, l *testLease, ttl, grace time.Duration) *run {
	t.Helper()
	clk := boottime.NewFake(time.Hour)
	if l.term == (store.Term{}) {
		l.term = store.Term{Start: clk.Now(), TTL: ttl}
	}
	if l.granted == 0 {
		l.granted = ttl
	}
	k, err := fence.New(fence.Config{Lease: l, TTL: ttl, Grace: grace, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &run{k: k, clk: clk, l: l, done: make(chan error, 1)}
	go func() { r.done <- k.Run(ctx) }()
	return r
}

func (r *run) end(t *testing.T) *fence.EndError {
	t.Helper()
	err := testsupport.Recv(t, r.done, "the keeper to end")
	var e *fence.EndError
	if !errors.As(err, &e) {
		t.Fatalf("Run returned %v, want *fence.EndError", err)
	}
	return e
}

func TestNewValidatesTiming(t *testing.T) {
	for _, tc := range []struct {
		ttl, grace time.Duration
		ok         bool
	}{
		{time.Second, 0, true},
		{999 * time.Millisecond, 0, false},
		{0, 0, false},
		{30 * time.Second, -time.Second, false},
		{30 * time.Second, time.Hour, true},
	} {
		_, err := fence.New(fence.Config{Lease: newTestLease(), TTL: tc.ttl, Grace: tc.grace, Clock: boottime.NewFake(0)})
		if (err == nil) != tc.ok {
			t.Errorf("New(ttl=%v, grace=%v) = %v, want ok=%v", tc.ttl, tc.grace, err, tc.ok)
		}
	}
	if _, err := fence.New(fence.Config{TTL: time.Second}); err == nil {
		t.Error("New without a lease succeeded")
	}
}

func TestRenewsEveryThirdOfTTLFromWhenSent(t *testing.T) {
	r := startKeeper(t, 3*time.Second, 0)
	for i := range 3 {
		r.clk.Advance(time.Second)
		testsupport.Recv(t, r.l.renews, fmt.Sprintf("renewal %d", i))
		r.l.renewErr <- nil
	}
	// An answer that takes 900ms: the next renewal is still due one TTL/3
	// after this one was sent, so 100ms after the answer.
	r.clk.Advance(time.Second)
	testsupport.Recv(t, r.l.renews, "slow renewal")
	r.clk.Advance(900 * time.Millisecond)
	r.l.renewErr <- nil
	r.clk.Advance(100 * time.Millisecond)
	testsupport.Recv(t, r.l.renews, "renewal one TTL/3 after the slow one was sent")
	r.l.renewErr <- nil
	select {
	case err := <-r.done:
		t.Fatalf("keeper ended while renewals succeed: %v", err)
	default:
	}
	r.k.Interrupt()
	if err := testsupport.Recv(t, r.done, "Run to return after Interrupt"); err != nil {
		t.Fatalf("Run after Interrupt = %v, want nil", err)
	}
}

func TestFailingRenewalsGiveUpBeforeExpiry(t *testing.T) {
	const ttl, grace = 3 * time.Second, 10 * time.Second
	r := startKeeper(t, ttl, grace)
	start := r.clk.Now()
	r.clk.Advance(time.Second)
	testsupport.Recv(t, r.l.renews, "first renewal")
	r.l.renewErr <- errors.New("disk on fire")
	// Retries follow every TTL/10 while time is left.
	r.clk.Advance(300 * time.Millisecond)
	testsupport.Recv(t, r.l.renews, "retry")
	r.l.renewErr <- errors.New("disk on fire")
	// Reserve: grace bounded by TTL/3 (1s) plus margin (300ms): the keeper
	// gives up at expiry-1.3s = start+1.7s, not before. At +1.6s it still
	// retries.
	r.clk.Advance(300 * time.Millisecond)
	testsupport.Recv(t, r.l.renews, "a retry before the give-up instant")
	r.l.renewErr <- errors.New("disk on fire")
	r.clk.WaitArmed(start + 1700*time.Millisecond)
	select {
	case err := <-r.done:
		t.Fatalf("gave up at +%v, before expiry less reserve: %v", r.clk.Now()-start, err)
	default:
	}
	r.clk.Advance(100 * time.Millisecond)
	e := r.end(t)
	if e.Reason != fence.Lost {
		t.Fatalf("reason %v, want lost", e.Reason)
	}
	if want := start + ttl - 300*time.Millisecond; e.StopBy != want {
		t.Errorf("StopBy = +%v, want +%v (expiry less margin)", e.StopBy-start, want-start)
	}
	// E10: the stop names the last renewal's error.
	if !strings.Contains(e.Error(), "the last renewal failed: disk on fire") {
		t.Errorf("the stop says %q: want the last renewal's error", e.Error())
	}
}

// E10: retries on a lease that is still healthy are one warning an
// outage, not one an attempt; its end is said once.
func TestOneWarningPerOutage(t *testing.T) {
	var buf syncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	l := newTestLease()
	clk := boottime.NewFake(time.Hour)
	l.term, l.granted = store.Term{Start: clk.Now(), TTL: 6 * time.Second}, 6*time.Second
	k, err := fence.New(fence.Config{Lease: l, TTL: 6 * time.Second, Clock: clk, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	start := clk.Now()
	// Each renewal at +at, once the keeper has armed its timer for it
	// (a success is due TTL/3 later, a failure's retry TTL/10).
	renew := func(err error, at time.Duration) {
		t.Helper()
		clk.WaitArmed(start + at)
		clk.Advance(start + at - clk.Now())
		testsupport.Recv(t, l.renews, "a renewal")
		l.renewErr <- err
	}
	fail := errors.New("no answer within 2s")
	for _, at := range []time.Duration{0, 5800 * time.Millisecond} { // two outages of three failures each
		renew(nil, at+2*time.Second)
		renew(fail, at+4*time.Second)
		renew(fail, at+4600*time.Millisecond)
		renew(fail, at+5200*time.Millisecond)
		renew(nil, at+5800*time.Millisecond)
	}
	clk.WaitArmed(start + 13600*time.Millisecond)
	k.Interrupt()
	testsupport.Recv(t, done, "Run to return")
	out := buf.String()
	if n := strings.Count(out, "lease operation failed"); n != 2 {
		t.Errorf("%d retry warnings for 2 outages of 3 failures, want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "lease renewed again"); n != 2 {
		t.Errorf("%d lines for the ends of 2 outages, want 2:\n%s", n, out)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHungStoreStillGivesUp(t *testing.T) {
	r := startKeeper(t, 3*time.Second, 0)
	r.clk.Advance(time.Second)
	testsupport.Recv(t, r.l.renews, "renewal")
	// Never answered: the store hangs.
	r.clk.Advance(2 * time.Second)
	e := r.end(t)
	if e.Reason != fence.Lost {
		t.Fatalf("reason %v, want lost", e.Reason)
	}
	if !strings.Contains(e.Error(), "has no answer") {
		t.Errorf("the stop says %q: want the renewal without an answer", e.Error())
	}
}

func TestSuspendPastExpiryIsLostAtOnce(t *testing.T) {
	r := startKeeper(t, 30*time.Second, 10*time.Second)
	start := r.clk.Now()
	r.clk.Advance(time.Hour) // a laptop lid closed for an hour
	e := r.end(t)
	if e.Reason != fence.Lost {
		t.Fatalf("reason %v, want lost", e.Reason)
	}
	if e.StopBy >= r.clk.Now() {
		t.Errorf("StopBy +%v is not in the past at +%v: the command would get time it does not have", e.StopBy-start, r.clk.Now()-start)
	}
}

func TestRenewalLostEndsAtOnce(t *testing.T) {
	r := startKeeper(t, 3*time.Second, 0)
	r.clk.Advance(time.Second)
	testsupport.Recv(t, r.l.renews, "renewal")
	r.l.renewErr <- fmt.Errorf("version 3, want 2: %w", store.ErrLost)
	e := r.end(t)
	if e.Reason != fence.Lost || !errors.Is(e, store.ErrLost) {
		t.Fatalf("got %v, want lost wrapping store.ErrLost", e)
	}
}

func TestChangesAreCheckedAtOnce(t *testing.T) {
	r := startKeeper(t, 30*time.Second, 0)
	r.l.check <- checkAnswer{err: store.ErrLost}
	r.l.changes <- struct{}{}
	// No clock movement: the change alone wakes the keeper.
	if e := r.end(t); e.Reason != fence.Lost {
		t.Fatalf("reason %v, want lost", e.Reason)
	}
}

func TestRequestsArePassedOnWhileTheLeaseIsKept(t *testing.T) {
	for _, tc := range []struct {
		req  store.Request
		want fence.Reason
	}{
		{store.RequestCancel, fence.Cancelled},
		{store.RequestHandover, fence.Handover},
	} {
		t.Run(tc.want.String(), func(t *testing.T) {
			r := startKeeper(t, 3*time.Second, 0)
			r.l.check <- checkAnswer{req: tc.req}
			r.l.changes <- struct{}{}
			if got := testsupport.Recv(t, r.k.Requests(), "the request"); got != tc.want {
				t.Fatalf("request %v, want %v", got, tc.want)
			}
			// The command is being stopped: the lease must still be renewed,
			// and a revocation meanwhile still seen.
			r.clk.Advance(time.Second)
			testsupport.Recv(t, r.l.renews, "a renewal after the request")
			r.l.renewErr <- nil
			r.l.check <- checkAnswer{err: store.ErrLost}
			r.l.changes <- struct{}{}
			if e := r.end(t); e.Reason != fence.Lost {
				t.Fatalf("reason %v, want lost", e.Reason)
			}
		})
	}
}

func TestFailingChecksDoNotStarveRenewals(t *testing.T) {
	l := newTestLease()
	l.checkErr = errors.New("record unreadable for a moment")
	r := startKeeperOn(t, l, 3*time.Second, 0)
	l.changes <- struct{}{}
	r.clk.Advance(time.Second)
	testsupport.Recv(t, r.l.renews, "a renewal while checks fail")
	r.l.renewErr <- nil
	if n := l.checks.Load(); n > 3 {
		t.Errorf("%d checks within one TTL/3 of failing checks: retried in a loop", n)
	}
	r.k.Interrupt()
	if err := testsupport.Recv(t, r.done, "Run to return"); err != nil {
		t.Fatal(err)
	}
}

func TestChangeWithNothingAskedKeepsGoing(t *testing.T) {
	r := startKeeper(t, 3*time.Second, 0)
	r.l.check <- checkAnswer{req: store.RequestNone}
	r.l.changes <- struct{}{}
	// The keeper must still renew after an uneventful check.
	r.clk.Advance(time.Second)
	testsupport.Recv(t, r.l.renews, "renewal after an uneventful check")
	r.l.renewErr <- nil
	r.k.Interrupt()
	if err := testsupport.Recv(t, r.done, "Run to return"); err != nil {
		t.Fatal(err)
	}
}

func TestTicksAreWrittenAndReleaseWaitsForRun(t *testing.T) {
	r := startKeeper(t, 30*time.Second, 0)
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	r.k.Tick(at)
	if got := testsupport.Recv(t, r.l.ticks, "tick written"); !got.Equal(at) {
		t.Fatalf("tick %v, want %v", got, at)
	}
	r.k.Interrupt()
	testsupport.Recv(t, r.done, "Run to return")
	if err := r.k.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsupport.Recv(t, r.l.released, "lease released")
}

func TestWatchdog(t *testing.T) {
	clk := boottime.NewFake(time.Minute)
	w, err := fence.NewWatchdog(5*time.Second, clk)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()

	clk.Advance(time.Hour) // never ticked: never stuck
	w.Tick()
	clk.Advance(4 * time.Second)
	w.Tick() // progress resets the watch
	clk.Advance(4 * time.Second)
	clk.WaitArmed(clk.Now() + time.Second) // the watchdog saw the tick and waits
	select {
	case err := <-done:
		t.Fatalf("stuck although it ticked 4s ago: %v", err)
	default:
	}
	clk.Advance(time.Second)
	err = testsupport.Recv(t, done, "watchdog to fire")
	var e *fence.EndError
	if !errors.As(err, &e) || e.Reason != fence.Stuck {
		t.Fatalf("got %v, want stuck", err)
	}
	if _, err := fence.NewWatchdog(0, clk); err == nil {
		t.Error("NewWatchdog(0) succeeded")
	}
}

// The keeper's clock starts from the lease's Term, not from New: a first
// write that took 300ms (a slow fsync) must not give the command 300ms
// past the expiry the record shows. Before the Term, StopBy was counted
// from fence.New and came 300ms late.
func TestSlowFirstWriteCountsFromBeforeTheWrite(t *testing.T) {
	const ttl = 3 * time.Second
	l := newTestLease()
	acquired := time.Hour - 300*time.Millisecond // the write began 300ms before fence.New
	l.term = store.Term{Start: acquired, TTL: ttl}
	r := startKeeperOn(t, l, ttl, 0)
	// The first renewal is due a third of the TTL after the write began.
	r.clk.WaitArmed(acquired + ttl/3)
	r.clk.Advance(ttl/3 - 300*time.Millisecond)
	testsupport.Recv(t, r.l.renews, "first renewal, one TTL/3 after the acquisition's write began")
	r.l.renewErr <- errors.New("store unreachable")
	r.clk.Advance(ttl) // every retry fails or hangs
	e := r.end(t)
	if want := acquired + ttl - 300*time.Millisecond; e.StopBy != want {
		t.Errorf("StopBy = %v after the write began, want %v (its expiry less margin)", e.StopBy-acquired, want-acquired)
	}
}

// A renewal that grants less than the TTL asked (an etcd keep-alive
// answers with the lease's remaining TTL) is counted as granted.
func TestRenewalGrantsTheReturnedTTL(t *testing.T) {
	const ttl = 3 * time.Second
	l := newTestLease()
	l.granted = 2 * time.Second
	r := startKeeperOn(t, l, ttl, 0)
	start := r.clk.Now()
	r.clk.Advance(time.Second)
	testsupport.Recv(t, r.l.renews, "first renewal")
	r.l.renewErr <- nil // valid until +1s+2s, next renewal due at +1s+2s/3
	r.clk.WaitArmed(start + time.Second + 2*time.Second/3)
	r.clk.Advance(2 * time.Second / 3)
	testsupport.Recv(t, r.l.renews, "second renewal, a third of the granted TTL later")
	// Never answered: lost by the end of the granted term less reserve.
	r.clk.Advance(2*time.Second - 2*time.Second/3)
	e := r.end(t)
	if want := start + 3*time.Second - 300*time.Millisecond; e.StopBy != want {
		t.Errorf("StopBy = +%v, want +%v (the granted term's end less margin)", e.StopBy-start, want-start)
	}
}

// A keeper paused while its process is stopped (job control) does not let
// its clock end the lease, however long the stop: on Resume it asks the
// store, and only the store's answer decides.
func TestPausedKeeperAsksTheStoreOnResume(t *testing.T) {
	const ttl = 3 * time.Second
	for _, tc := range []struct {
		name   string
		answer error
		held   bool
	}{
		{"still held", nil, true},
		{"revoked meanwhile", fmt.Errorf("revoked: %w", store.ErrLost), false},
		{"store failing past the expiry", errors.New("disk on fire"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startKeeper(t, ttl, 0)
			paused := r.clk.Now()
			r.k.Pause()
			r.clk.WaitArmed(paused + 24*time.Hour)
			// Stopped for ten TTLs: no renewal, no end.
			r.clk.Advance(10 * ttl)
			select {
			case err := <-r.done:
				t.Fatalf("a paused keeper ended: %v", err)
			case <-r.l.renews:
				t.Fatal("a paused keeper renewed")
			default:
			}
			resumed := make(chan error, 1)
			go func() { resumed <- r.k.Resume(context.Background()) }()
			testsupport.Recv(t, r.l.renews, "the renewal of Resume")
			r.l.renewErr <- tc.answer
			err := testsupport.Recv(t, resumed, "Resume to answer")
			var end *fence.EndError
			switch {
			case tc.held && err != nil:
				t.Fatalf("Resume = %v, want nil", err)
			case !tc.held && (!errors.As(err, &end) || end.Reason != fence.Lost):
				t.Fatalf("Resume = %v, want an EndError Lost", err)
			}
			// Either way the keeper itself does not end the run: the caller
			// stops the command first.
			select {
			case err := <-r.done:
				t.Fatalf("the keeper ended after Resume: %v", err)
			default:
			}
			r.k.Interrupt()
			if err := testsupport.Recv(t, r.done, "Run to return after Interrupt"); err != nil {
				t.Fatalf("Run after Interrupt = %v, want nil", err)
			}
		})
	}
}
