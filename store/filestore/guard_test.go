package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// lockedBuffer is a log output safe for List's parallel readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *lockedBuffer) has(s string) bool { return strings.Contains(b.String(), s) }

// A process stopped while it holds a key's guard: Status and List answer
// from the record, read without the guard, and log who holds it; Acquire
// without Wait finds the key busy; Revoke waits, says for whom, and ends
// with its context, writing nothing; once the guard is free it revokes.
func TestGuardHeldByStoppedProcess(t *testing.T) {
	old := guardWait
	guardWait = 50 * time.Millisecond // not parallel: the package's seam
	t.Cleanup(func() { guardWait = old })
	logs := &lockedBuffer{}
	s, root := newStore(t, Options{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})})
	l := mustAcquire(t, s, "k", claim("a"))

	h := spawn(t, "stopguard", root, "k")
	h.Expect("locked")
	t.Cleanup(func() {
		unix.Kill(h.Pid(), unix.SIGCONT)
		h.Kill()
	})
	if err := testsupport.Poll(func() bool { return procRunState(h.Pid()) == "stopped" }); err != nil {
		t.Fatalf("helper %d never stopped: %s", h.Pid(), procRunState(h.Pid()))
	}
	note := fmt.Sprintf("the key's guard lock is held by pid %d (stopped); read without it", h.Pid())

	ctx := t.Context()
	st, err := s.Status(ctx, "k")
	if err != nil || st.State != store.Held || st.Holder == nil || st.Holder.Name != "a" || st.Holder.Fence != l.Fence() {
		t.Fatalf("Status: %+v, %v; want held by a at fence %d", st, err, l.Fence())
	}
	if !logs.has(note) {
		t.Errorf("Status logged no %q", note)
	}
	all, err := s.List(ctx)
	if err != nil || len(all) != 1 || all[0].State != store.Held {
		t.Errorf("List: %+v, %v; want k held", all, err)
	}

	c := claim("b")
	lb, holder, err := s.Acquire(ctx, "k", c)
	if err != nil || lb != nil || holder == nil || !strings.Contains(holder.Name, fmt.Sprintf("guard lock, pid %d (stopped)", h.Pid())) {
		t.Errorf("Acquire without Wait: %v, %+v, %v; want busy, in the way the guard's holder", lb, holder, err)
	}

	rctx, cancel := context.WithCancel(ctx)
	revoked := make(chan error, 1)
	go func() {
		_, err := s.Revoke(rctx, "k")
		revoked <- err
	}()
	if err := testsupport.Poll(func() bool {
		return logs.has(fmt.Sprintf(`waiting for the key's guard lock: release --force goes on once it is free: path=%s held_by="pid %d (stopped)"`, keyPath(root, "k")+"/guard", h.Pid()))
	}); err != nil {
		t.Fatalf("Revoke never said what it waits for:\n%s", logs)
	}
	cancel()
	if err := <-revoked; !errors.Is(err, context.Canceled) {
		t.Errorf("Revoke, its context ended while it waited: %v, want context.Canceled", err)
	}

	unix.Kill(h.Pid(), unix.SIGCONT)
	h.Stdin.Close()
	if err := h.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	if ok, err := s.Revoke(ctx, "k"); !ok || err != nil {
		t.Errorf("Revoke once the guard is free: %v, %v; want revoked", ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("release of the revoked lease: %v", err)
	}
}
