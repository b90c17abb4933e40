package fenced_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// The lease is told how its holding ended before it is released, for the
// key's history (N2): the command's own exit status, or why fencerun
// stopped it.
func TestEndingForHistory(t *testing.T) {
	cases := []struct {
		name string
		end  func(h *harness)
		want store.EndKind
		code int
	}{
		{"exited", func(h *harness) { h.proc.exit <- supervisor.Status{Code: 3} }, store.EndExited, 3},
		{"signal", func(h *harness) { h.proc.exit <- supervisor.Status{Signal: syscall.SIGKILL} }, store.EndSignal, -1},
		{"lost", func(h *harness) {
			h.lease.change(fmt.Errorf("revoked: %w", store.ErrLost))
			testsupport.Recv(t, h.proc.stops, "the stop")
			h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
		}, store.EndLost, -1},
		{"timeout", func(h *harness) {
			h.clock.WaitArmed(epoch + time.Second)
			h.clock.Advance(time.Second)
			testsupport.Recv(t, h.proc.stops, "the stop")
			h.proc.exit <- supervisor.Status{Signal: syscall.SIGTERM}
		}, store.EndTimeout, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness()
			h.cfg.Timeout = time.Second
			h.run()
			testsupport.Recv(t, h.started, "the start")
			c.end(h)
			h.outcome(t)
			e := h.lease.ending.Load()
			if e == nil || e.How != c.want {
				t.Fatalf("ending %+v, want %s", e, c.want)
			}
			if c.code >= 0 && (e.ExitStatus == nil || *e.ExitStatus != c.code) {
				t.Errorf("exit status %v, want %d", e.ExitStatus, c.code)
			}
			if c.want == store.EndSignal && e.Signal != "SIGKILL" {
				t.Errorf("signal %q, want SIGKILL", e.Signal)
			}
		})
	}
}
