package fenced_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// Only a command that exits 0 by itself under the lease marks the run's
// ID done (O1); every other end releases without a mark.
func TestOnceMarksOnlyASuccess(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status supervisor.Status
		mark   bool
	}{
		{"exit 0", supervisor.Status{}, true},
		{"exit 1", supervisor.Status{Code: 1}, false},
		{"signal", supervisor.Status{Signal: syscall.SIGTERM}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			h.cfg.Once = "2026-12-04T21:00:00Z"
			h.run()
			testsupport.Recv(t, h.started, "the start")
			h.proc.exit <- tc.status
			o := h.outcome(t)
			if o.End != fenced.Exited {
				t.Fatalf("outcome = %+v, want Exited", o)
			}
			if got := h.lease.marked != ""; got != tc.mark {
				t.Fatalf("marked %q; want a mark: %v", h.lease.marked, tc.mark)
			}
		})
	}
}

// A run without --once never marks, whatever its command's end.
func TestNoOnceNoMark(t *testing.T) {
	h := newHarness().run()
	testsupport.Recv(t, h.started, "the start")
	h.proc.exit <- supervisor.Status{}
	h.outcome(t)
	if h.lease.marked != "" {
		t.Fatalf("marked %q without --once", h.lease.marked)
	}
}

// A cancelled run's command may exit 0 as it stops: it did not run to
// its end, and its ID stays open.
func TestOnceCancelledLeavesItOpen(t *testing.T) {
	h := newHarness()
	h.cfg.Once = "id"
	h.run()
	testsupport.Recv(t, h.started, "the start")
	h.lease.change(nil) // a cancel request
	testsupport.Recv(t, h.proc.stops, "the stop")
	h.proc.exit <- supervisor.Status{}
	o := h.outcome(t)
	if o.End != fenced.Cancelled || h.lease.marked != "" {
		t.Fatalf("outcome %+v, marked %q; want Cancelled and no mark", o, h.lease.marked)
	}
}

// A success whose lease was lost before the mark was written does not
// count: the run ends as a broken fence (76), and one whose mark failed
// otherwise ends Failed (125); neither marks.
func TestOnceMarkFails(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want fenced.End
	}{
		{fmt.Errorf("%w: revoked", store.ErrLost), fenced.FenceBroken},
		{fmt.Errorf("disk full"), fenced.Failed},
	} {
		h := newHarness()
		h.cfg.Once = "id"
		h.lease.markErr = tc.err
		h.run()
		testsupport.Recv(t, h.started, "the start")
		h.proc.exit <- supervisor.Status{}
		if o := h.outcome(t); o.End != tc.want {
			t.Errorf("mark error %v: outcome %+v, want end %v", tc.err, o, tc.want)
		}
	}
}

// An Acquire that finds the ID done ends the run AlreadyDone, with no
// command started and what was prepared discarded.
func TestAlreadyDone(t *testing.T) {
	h := newHarness()
	h.cfg.Once = "id"
	h.cfg.Acquire = func(context.Context) (store.Lease, error) {
		return nil, fmt.Errorf("%w: by someone", fenced.ErrAlreadyDone)
	}
	h.run()
	o := testsupport.Recv(t, h.out, "the run to end")
	h.notStarted(t)
	if o.End != fenced.AlreadyDone {
		t.Fatalf("outcome = %+v, want AlreadyDone", o)
	}
}
