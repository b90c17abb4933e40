package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencerun/fencerun/store"
)

// history reads key's holdings.
func history(t *testing.T, s store.Store, key string) []store.Holding {
	t.Helper()
	h, err := s.History(t.Context(), key, 0)
	if err != nil {
		t.Fatalf("History(%q): %v", key, err)
	}
	return h
}

// describeHistory is hs in one line, for failures.
func describeHistory(hs []store.Holding) string {
	out := ""
	for _, h := range hs {
		how := "open"
		if h.Ending != nil {
			how = string(h.Ending.How)
		}
		slot := ""
		if h.Slot != nil {
			slot = fmt.Sprintf(" slot %d", *h.Slot)
		}
		out += fmt.Sprintf("[fence %d%s %s %s] ", h.Fence, slot, h.Name, how)
	}
	return out
}

// Every holding is kept, oldest first, with its holder, start and end and
// how it ended, as the holder said, or as the revoker said, which the
// holder's own end does not overwrite; a holder that died holding reads
// "unknown (holder died)" once the next one took the key; the current
// holding has no end (N2). Another client reads the same.
func testHistoryKeepsEveryHolding(t *testing.T, b *Backend) {
	s, desc := b.New(t)
	if h := history(t, s, "h"); len(h) != 0 {
		t.Fatalf("a key never used has a history: %s", describeHistory(h))
	}
	zero, sig := 0, "SIGTERM"
	a := acquire(t, s, "h", b.claim("a"))
	a.Ended(store.Ending{How: store.EndExited, ExitStatus: &zero})
	release(t, a)
	bl := acquire(t, s, "h", b.claim("b"))
	bl.Ended(store.Ending{How: store.EndSignal, Signal: sig})
	release(t, bl)
	c := acquire(t, s, "h", b.claim("c"))
	other := b.openSecond(t, desc)
	if ok, err := other.Revoke(t.Context(), "h", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	c.Ended(store.Ending{How: store.EndLost})
	_ = c.Release(t.Context())
	dead := b.spawn(t, desc, "h", "")
	deadFence := dead.acquired(guard)
	dead.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), b.deadWithin())
	defer cancel()
	e, _, err := s.Acquire(ctx, "h", b.claim("e"))
	if err != nil || e == nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	defer release(t, e)

	got := history(t, other, "h")
	want := []struct {
		name  string
		fence uint64
		how   store.EndKind
	}{{"a", a.Fence(), store.EndExited}, {"b", bl.Fence(), store.EndSignal}, {"c", c.Fence(), store.EndRevoked},
		{"helper", deadFence, store.EndUnknown}, {"e", e.Fence(), ""}}
	if len(got) != len(want) {
		t.Fatalf("history = %s; want %d holdings", describeHistory(got), len(want))
	}
	for i, w := range want {
		h := got[i]
		how := store.EndKind("")
		if h.Ending != nil {
			how = h.Ending.How
		}
		if h.Name != w.name || h.Fence != w.fence || how != w.how || h.Host == "" || h.PID == 0 || h.Start.IsZero() {
			t.Errorf("holding %d = %+v (ending %+v); want %s, fence %d, ended %q, with pid, host and start", i, h, h.Ending, w.name, w.fence, w.how)
		}
		if (how == store.EndExited || how == store.EndSignal || how == store.EndRevoked) && (h.End.IsZero() || h.End.Before(h.Start)) {
			t.Errorf("holding %d ended %v, started %v: want its end", i, h.End, h.Start)
		}
	}
	if s := got[0].Ending.ExitStatus; s == nil || *s != 0 {
		t.Errorf("holding a's exit status %v, want 0", s)
	}
	if got[1].Ending.Signal != sig {
		t.Errorf("holding b's signal %q, want %s", got[1].Ending.Signal, sig)
	}
	if got[2].Ending.By == "" {
		t.Error("the revoked holding does not say who revoked it")
	}
}

// The last MaxHistory holdings are kept, never more: the oldest go first.
func testHistoryBound(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	var fences []uint64
	for range store.MaxHistory + 3 {
		l := acquire(t, s, "bound", b.claim("x"))
		fences = append(fences, l.Fence())
		release(t, l)
	}
	got := history(t, s, "bound")
	if len(got) != store.MaxHistory {
		t.Fatalf("%d holdings kept after %d, want %d", len(got), len(fences), store.MaxHistory)
	}
	if got[0].Fence != fences[3] || got[len(got)-1].Fence != fences[len(fences)-1] {
		t.Errorf("kept fences %d..%d, want %d..%d", got[0].Fence, got[len(got)-1].Fence, fences[3], fences[len(fences)-1])
	}
	for i := 1; i < len(got); i++ {
		if got[i].Fence <= got[i-1].Fence || got[i].Ending == nil || got[i].Ending.How != store.EndReleased {
			t.Fatalf("holding %d: %+v after fence %d; want rising fences, each released", i, got[i], got[i-1].Fence)
		}
	}
	// A limit reads the newest holdings only, the current one included.
	l := acquire(t, s, "bound", b.claim("now"))
	defer release(t, l)
	last, err := s.History(t.Context(), "bound", 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(last) != 60 || last[0].Fence != fences[len(fences)-59] || last[59].Fence != l.Fence() || last[59].Ending != nil {
		t.Fatalf("History(60) = %d holdings from fence %d; want the newest 59 ended ones from %d and the current one", len(last), last[0].Fence, fences[len(fences)-59])
	}
}

// Prune keeps a history; ForgetHistory drops a free key's, never a held
// one's (N2).
func testHistoryPruneKeepsForget(t *testing.T, b *Backend) {
	s, _ := b.New(t)
	release(t, acquire(t, s, "p", b.claim("x")))
	if _, err := s.Prune(t.Context()); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if h := history(t, s, "p"); len(h) != 1 {
		t.Fatalf("after Prune the history is %s; want the one holding", describeHistory(h))
	}
	l := acquire(t, s, "p", b.claim("y"))
	if dropped, err := s.ForgetHistory(t.Context(), "p"); dropped || err != nil {
		t.Errorf("ForgetHistory of a held key = %v, %v; want false", dropped, err)
	}
	if h := history(t, s, "p"); len(h) != 2 {
		t.Fatalf("a held key's history is %s after ForgetHistory; want it kept", describeHistory(h))
	}
	release(t, l)
	if dropped, err := s.ForgetHistory(t.Context(), "p"); !dropped || err != nil {
		t.Errorf("ForgetHistory of a free key = %v, %v; want true", dropped, err)
	}
	if h := history(t, s, "p"); len(h) != 0 {
		t.Fatalf("after ForgetHistory the history is %s", describeHistory(h))
	}
}
