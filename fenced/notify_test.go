package fenced_test

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/internal/sdnotify"
	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// withNotify gives the run a notify socket whose messages the test reads.
func (h *harness) withNotify(watchdog time.Duration, relay fenced.Relay) chan string {
	sent := make(chan string, 64)
	h.cfg.Notify = &fenced.Notify{Send: func(s string) error { sent <- s; return nil }, Relay: relay, Watchdog: watchdog}
	return sent
}

// noMessage checks that nothing was sent.
func noMessage(t *testing.T, sent chan string, why string) {
	t.Helper()
	select {
	case s := <-sent:
		t.Fatalf("sent %q %s", s, why)
	default:
	}
}

// With --ready start, the service is ready once the command started
// under the lease, and the status says which lease; a lost lease says so
// and that the service is stopping (N1).
func TestNotifyReadyAndLost(t *testing.T) {
	h := newHarness()
	sent := h.withNotify(0, nil)
	h.run()
	if s := testsupport.Recv(t, sent, "the ready message"); s != "STATUS=holding k (fence 7)\nREADY=1" {
		t.Fatalf("sent %q, want the holding status and READY=1", s)
	}
	h.lease.change(fmt.Errorf("the lease on k (fence 7) was revoked: %w", store.ErrLost))
	s := testsupport.Recv(t, sent, "the lost lease's message")
	if !strings.HasPrefix(s, "STATUS=lease lost: ") || !strings.Contains(s, "was revoked") || !strings.HasSuffix(s, "\nSTOPPING=1") {
		t.Fatalf("sent %q, want STATUS=lease lost ... and STOPPING=1", s)
	}
	testsupport.Recv(t, h.proc.stops, "the broken fence's stop")
	h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
	if o := h.outcome(t); o.End != fenced.FenceBroken {
		t.Fatalf("outcome = %+v, want FenceBroken", o)
	}
	noMessage(t, sent, "after the lost lease's")
}

// A command that ends by itself is not stopped by fencerun: no STOPPING.
func TestNotifyExitedByItself(t *testing.T) {
	h := newHarness()
	sent := h.withNotify(0, nil)
	h.run()
	testsupport.Recv(t, sent, "the ready message")
	h.proc.exit <- supervisor.Status{Code: 0}
	h.outcome(t)
	noMessage(t, sent, "for a command that exited by itself")
}

// The watchdog is fed every half interval while the lease is renewed,
// and no longer once renewals stop: within an interval of the renewal
// that is due (N1).
func TestNotifyWatchdogStopsWithRenewals(t *testing.T) {
	// Fed every 1.5s, at instants apart from the keeper's (renewal due at
	// 10s, giving up at 19.5s).
	const dog = 3 * time.Second
	h := newHarness()
	h.lease.hang = make(chan struct{})
	sent := h.withNotify(dog, nil)
	h.run()
	testsupport.Recv(t, sent, "the ready message")
	if s := testsupport.Recv(t, sent, "the first feed"); s != "WATCHDOG=1" {
		t.Fatalf("sent %q, want WATCHDOG=1", s)
	}
	// The renewal due at 10s hangs: the feeds go on until 11.5s, not after.
	for at := dog / 2; at <= 15*time.Second; at += dog / 2 {
		h.clock.Advance(dog / 2)
		h.clock.WaitArmed(epoch + at + dog/2)
		fed := false
		select {
		case s := <-sent:
			fed = s == "WATCHDOG=1"
		default:
		}
		if want := at < 11500*time.Millisecond; fed != want {
			t.Fatalf("at %v: fed %v, want %v (renewals hang from 10s)", at, fed, want)
		}
	}
	close(h.lease.hang)
	h.proc.exit <- supervisor.Status{}
	h.outcome(t)
}

// With --ready command, READY=1 is the command's: fencerun relays what
// the command's tree says, from its own pid, but never MAINPID nor what
// another process says, and feeds the watchdog only as the command does
// (N1).
func TestNotifyRelay(t *testing.T) {
	h := newHarness()
	relay := &fakeRelay{msgs: make(chan sdnotify.Message), closed: make(chan struct{})}
	sent := h.withNotify(2*time.Second, relay)
	h.run()
	if s := testsupport.Recv(t, sent, "the holding status"); s != "STATUS=holding k (fence 7)" {
		t.Fatalf("sent %q, want the holding status without READY=1", s)
	}
	relay.msgs <- sdnotify.Message{PID: 1234, State: "READY=1"}
	relay.msgs <- sdnotify.Message{PID: 4242, State: "MAINPID=1\nREADY=1\nSTATUS=serving\nFDSTORE=1\nWATCHDOG=1\n"}
	if s := testsupport.Recv(t, sent, "the relayed message"); s != "READY=1\nSTATUS=serving\nWATCHDOG=1" {
		t.Fatalf("relayed %q, want READY=1, STATUS and WATCHDOG=1 only (a stranger's READY dropped)", s)
	}
	h.clock.Advance(5 * time.Second)
	noMessage(t, sent, "by fencerun's own watchdog with --ready command")
	h.proc.exit <- supervisor.Status{}
	h.outcome(t)
	testsupport.Recv(t, relay.closed, "the relay's close")
}

type fakeRelay struct {
	msgs   chan sdnotify.Message
	closed chan struct{}
}

func (r *fakeRelay) Read() (sdnotify.Message, error) {
	select {
	case m := <-r.msgs:
		return m, nil
	case <-r.closed:
		return sdnotify.Message{}, net.ErrClosed
	}
}

func (r *fakeRelay) Close() error { close(r.closed); return nil }
