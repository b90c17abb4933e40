package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

	h := stoppedGuard(t, root, "k")
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
		_, err := s.Revoke(rctx, "k", store.Which{})
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
	if ok, err := s.Revoke(ctx, "k", store.Which{}); !ok || err != nil {
		t.Errorf("Revoke once the guard is free: %v, %v; want revoked", ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("release of the revoked lease: %v", err)
	}
}

// On a file system whose locks /proc/locks names by another device than
// fstat does (an overlay whose upper layer is a tmpfs),
// a reader without the guard cannot see the live holder's lock in the
// table. It must not report the key free, its live holder dead and its
// command as leftovers: it sees that the table does not show the guard it
// waited for either, and takes the record's word.
func TestGuardHeldOnAnOverlay(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting needs root")
	}
	d := t.TempDir()
	lower, up, merged := filepath.Join(d, "lower"), filepath.Join(d, "up"), filepath.Join(d, "merged")
	for _, p := range []string{lower, up, merged} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("none", up, "tmpfs", 0, "mode=0700"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(up, unix.MNT_DETACH) })
	for _, p := range []string{"u", "w"} {
		if err := os.Mkdir(filepath.Join(up, p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+up+"/u,workdir="+up+"/w"); err != nil {
		t.Skipf("overlay: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })

	old := guardWait
	guardWait = 50 * time.Millisecond // not parallel: the package's seam
	t.Cleanup(func() { guardWait = old })
	root := filepath.Join(merged, "state")
	s := openAt(t, root)
	l := mustAcquire(t, s, "k", claim("a"))
	t.Cleanup(func() { l.Release(context.Background()) })

	stoppedGuard(t, root, "k")
	st, err := s.Status(t.Context(), "k")
	if err != nil || st.State != store.Held || st.Holder == nil || st.Holder.Name != "a" || len(st.Leftovers) != 0 {
		t.Fatalf("Status on an overlay, the guard held by a stopped process: %+v, %v; want held by a, no leftovers", st, err)
	}
}

// stoppedGuard starts a helper process that takes key's guard in the
// store at root and stops itself, and waits until it is stopped.
func stoppedGuard(t *testing.T, root, key string) *testsupport.Helper {
	t.Helper()
	h := spawn(t, "stopguard", root, key)
	h.Expect("locked")
	t.Cleanup(func() {
		unix.Kill(h.Pid(), unix.SIGCONT)
		h.Kill()
	})
	if err := testsupport.Poll(func() bool { return procRunState(h.Pid()) == "stopped" }); err != nil {
		t.Fatalf("helper %d never stopped: %s", h.Pid(), procRunState(h.Pid()))
	}
	return h
}
