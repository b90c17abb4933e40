package resident

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

func TestHandoverToANewerBuild(t *testing.T) {
	t.Parallel()
	_, mid, newer := progs(t)
	storePath := filepath.Join(t.TempDir(), "app.db")
	h := startHolder(t, "keeper", storePath, mid, "")

	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	r, ref, err := Acquire(ctx, storePath, Claim{Build: buildOf(t, newer), HandoverWait: guard})
	if err != nil || ref != nil {
		t.Fatalf("newcomer: %v, %v", ref, err)
	}
	defer r.Release(context.Background())
	if l := h.Next(); l != "handover" {
		t.Fatalf("holder said %q, want handover", l)
	}
	if code := h.ExitCode(); code != 77 {
		t.Fatalf("holder exited %d, want 77", code)
	}
	if r.Fence() != h.fence+1 {
		t.Errorf("fence %d after %d", r.Fence(), h.fence)
	}
	st := mustStatus(t, storePath)
	if st.Holder == nil || st.Holder.PID != os.Getpid() || !Same(*st.Holder.Build, buildOf(t, newer)) {
		t.Fatalf("status after handover: %+v", st)
	}
	if _, err := os.Lstat(storePath + ".resident.handover"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("request left behind: %v", err)
	}
}

func TestHandoverRefusals(t *testing.T) {
	t.Parallel()
	older, mid, newer := progs(t)
	storePath := filepath.Join(t.TempDir(), "app.db")
	h := startHolder(t, "keeper", storePath, mid, "")

	for _, tc := range []struct {
		name   string
		claim  Claim
		want   RefusalReason
		detail string
	}{
		{"older build", Claim{Build: buildOf(t, older)}, ReasonNotNewer, "older"},
		{"same build", Claim{Build: buildOf(t, mid)}, ReasonNotNewer, "the same build"},
		{"unstamped", Claim{}, ReasonNotNewer, "unstamped"},
		{"no-handover", Claim{Build: buildOf(t, newer), NoHandover: true}, ReasonNoHandover, ""},
		{"request predates the holder", Claim{Build: buildOf(t, newer),
			Now: func() time.Time { return time.Now().Add(-time.Hour) }}, ReasonRefused, "predates"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		tc.claim.HandoverWait = guard
		r, ref, err := Acquire(ctx, storePath, tc.claim)
		cancel()
		if err != nil || r != nil || ref == nil {
			t.Fatalf("%s: %v, %v, %v", tc.name, r, ref, err)
		}
		if ref.Reason != tc.want || !strings.Contains(ref.Detail, tc.detail) || ref.Holder.PID != h.pid {
			t.Errorf("%s: refusal %+v, want %q naming pid %d", tc.name, ref, tc.want, h.pid)
		}
	}
	// The holder is untouched: same process, same fence, still holding.
	st := mustStatus(t, storePath)
	if st.State != store.Held || st.Holder.PID != h.pid || st.Holder.Fence != h.fence {
		t.Fatalf("holder after refusals: %+v", st)
	}
	if code := h.exit(); code != 0 {
		t.Fatalf("holder exited %d, want 0", code)
	}
}

func TestHandoverTimesOut(t *testing.T) {
	t.Parallel()
	_, mid, newer := progs(t)
	storePath := filepath.Join(t.TempDir(), "app.db")
	// A holder that never looks at its changes.
	holder := mustAcquire(t, storePath, Claim{Build: buildOf(t, mid)})
	r, ref, err := Acquire(context.Background(), storePath, Claim{Build: buildOf(t, newer), HandoverWait: 200 * time.Millisecond})
	if err != nil || r != nil || ref == nil || ref.Reason != ReasonHandoverTimedOut || ref.Holder.Fence != holder.Fence() {
		t.Fatalf("Acquire = %v, %+v, %v", r, ref, err)
	}
}

func TestRefusedNewcomerWithWaitStaysAStandby(t *testing.T) {
	t.Parallel()
	_, mid, newer := progs(t)
	storePath := filepath.Join(t.TempDir(), "app.db")
	holder := mustAcquire(t, storePath, Claim{Build: buildOf(t, mid)})
	logs := newLogLines()
	done := make(chan *Role, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		r, _, err := Acquire(ctx, storePath, Claim{Claim: store.Claim{Wait: true}, Build: buildOf(t, newer),
			Now: func() time.Time { return time.Now().Add(-time.Hour) }, Logger: logs.logger()})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	logs.waitFor(t, "asking the holder to hand over")
	select {
	case <-holder.Changes():
	case <-time.After(guard):
		t.Fatal("holder saw no request")
	}
	if req, err := holder.Check(context.Background()); err != nil || req != store.RequestNone {
		t.Fatalf("Check = %v, %v; want a refusal", req, err)
	}
	logs.waitFor(t, "waiting as a standby")
	holder.Release(context.Background())
	r := <-done
	if r == nil || r.Fence() != holder.Fence()+1 {
		t.Fatalf("standby got %v", r)
	}
	r.Release(context.Background())
}

// The holder judges requests itself: one from a newcomer that has died, and
// one left behind for an earlier holder, are refused and consumed.
func TestHolderRefusesDeadAndStaleRequests(t *testing.T) {
	t.Parallel()
	_, mid, newer := progs(t)
	storePath := filepath.Join(t.TempDir(), "app.db")
	reqPath := storePath + ".resident.handover"
	p, err := pathsOf(storePath)
	if err != nil {
		t.Fatal(err)
	}
	send := func(q request) {
		t.Helper()
		if err := sendRequest(p, q, holderSocket(p), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Left behind for an earlier holder, before this one acquired.
	send(request{Schema: schema, ID: "stale", PID: os.Getpid(), Host: hostname(), Build: buildOf(t, newer),
		RequestedAt: time.Now(), Fence: 12345})
	holder := mustAcquire(t, storePath, Claim{Build: buildOf(t, mid)})
	expectRefusal := func(id, why string) {
		t.Helper()
		select {
		case <-holder.Changes():
		case <-time.After(guard):
			t.Fatal("no change signalled")
		}
		if req, err := holder.Check(context.Background()); err != nil || req != store.RequestNone {
			t.Fatalf("Check = %v, %v", req, err)
		}
		data, _ := os.ReadFile(storePath + ".resident.lock")
		p, _, err := decodePayload(data, "lock")
		if err != nil {
			t.Fatal(err)
		}
		if p.HandoverRefused == nil || p.HandoverRefused.ID != id || !strings.Contains(p.HandoverRefused.Reason, why) {
			t.Fatalf("payload records %+v, want %s refused for %q", p.HandoverRefused, id, why)
		}
		if _, err := os.Lstat(reqPath); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("request not consumed: %v", err)
		}
	}
	expectRefusal("stale", "not this holder's fence")

	send(request{Schema: schema, ID: "dead", PID: deadPID(t), Host: hostname(), Build: buildOf(t, newer),
		RequestedAt: time.Now(), Fence: holder.Fence()})
	expectRefusal("dead", "gone")

	// A valid request is accepted, and Check keeps saying so.
	send(request{Schema: schema, ID: "live", PID: os.Getpid(), Host: hostname(), Build: buildOf(t, newer),
		RequestedAt: time.Now(), Fence: holder.Fence()})
	<-holder.Changes()
	for range 2 {
		if req, err := holder.Check(context.Background()); err != nil || req != store.RequestHandover {
			t.Fatalf("Check = %v, %v; want RequestHandover", req, err)
		}
	}
	// An unreadable request is ignored, not an error that would be retried.
	if err := os.WriteFile(reqPath, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := takeRequest(reqPath); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), reqPath) {
		t.Fatalf("takeRequest of garbage = %v", err)
	}
}

// Two newer newcomers at once: one takes the role; the other then faces a
// holder of its own build and is refused as not newer.
func TestTwoNewcomersAtOnce(t *testing.T) {
	t.Parallel()
	_, mid, newer := progs(t)
	storePath := filepath.Join(t.TempDir(), "app.db")
	holder := mustAcquire(t, storePath, Claim{Build: buildOf(t, mid)})
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	go func() { // the holder's keeper
		for {
			select {
			case <-ctx.Done():
				return
			case <-holder.Changes():
			}
			if req, _ := holder.Check(ctx); req == store.RequestHandover {
				holder.Release(ctx)
				return
			}
		}
	}()
	type result struct {
		r   *Role
		ref *Refusal
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			r, ref, err := Acquire(ctx, storePath, Claim{Build: buildOf(t, newer), HandoverWait: guard})
			if err != nil {
				t.Error(err)
			}
			results <- result{r, ref}
		}()
	}
	a, b := <-results, <-results
	if a.r == nil {
		a, b = b, a
	}
	if a.r == nil || b.r != nil {
		t.Fatalf("results %+v, %+v: want exactly one holder", a, b)
	}
	defer a.r.Release(context.Background())
	if b.ref == nil || b.ref.Reason != ReasonNotNewer || b.ref.Holder.Fence != a.r.Fence() {
		t.Fatalf("loser: %+v, want not newer than fence %d", b.ref, a.r.Fence())
	}
}
