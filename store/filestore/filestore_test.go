package filestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/store"
)

// clock is a settable wall clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newStore(t testing.TB, opts ...Options) (*Store, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "state")
	return openAt(t, root, opts...), root
}

func openAt(t testing.TB, root string, opts ...Options) *Store {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := Open(root, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func claim(name string) store.Claim {
	return store.Claim{Name: name, Reason: "testing", TTL: time.Minute, Marker: "marker-" + name}
}

func keyPath(root, key string) string { return filepath.Join(root, "keys", encodeKey(key)) }

func mustAcquire(t testing.TB, s *Store, key string, c store.Claim) store.Lease {
	t.Helper()
	l, h, err := s.Acquire(context.Background(), key, c)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if l == nil {
		t.Fatalf("Acquire(%q): busy, held by %+v", key, h)
	}
	return l
}

func mustRelease(t testing.TB, l store.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func mustStatus(t testing.TB, s *Store, key string) *store.Status {
	t.Helper()
	st, err := s.Status(context.Background(), key)
	if err != nil {
		t.Fatalf("Status(%q): %v", key, err)
	}
	return st
}

func TestAcquireRenewTickRelease(t *testing.T) {
	clk := newClock()
	s, root := newStore(t, Options{Now: clk.now})
	ctx := t.Context()
	c := claim("web")
	l := mustAcquire(t, s, "deploy:staging", c)
	if l.Fence() != 1 || l.Key() != "deploy:staging" || l.Predecessor() != nil || l.Env() != nil {
		t.Errorf("first lease: fence %d key %q predecessor %v env %v", l.Fence(), l.Key(), l.Predecessor(), l.Env())
	}
	st := mustStatus(t, s, "deploy:staging")
	h := st.Holder
	if st.State != store.Held || h == nil || h.Name != "web" || h.PID != os.Getpid() || h.Reason != "testing" ||
		h.Fence != 1 || !h.Acquired.Equal(clk.now()) || !h.Expires.Equal(clk.now().Add(time.Minute)) {
		t.Fatalf("status after acquire: %+v holder %+v", st, h)
	}

	clk.add(10 * time.Second)
	before := boottime.Now()
	term, err := l.Renew(ctx)
	if err != nil || term.TTL != time.Minute || term.Start < before || term.Start > boottime.Now() {
		t.Fatalf("Renew = %+v, %v; want a minute from within the call", term, err)
	}
	exp := clk.now().Add(time.Minute)
	tick := clk.now().Add(time.Second)
	if err := l.Tick(ctx, tick); err != nil {
		t.Fatalf("Tick: %v", err)
	}
	// The lease's own writes are not someone else's change.
	if req, err := l.Check(ctx); err != nil || req != store.RequestNone {
		t.Fatalf("Check after own renew and tick = %v, %v", req, err)
	}
	st = mustStatus(t, s, "deploy:staging")
	if !st.Holder.Expires.Equal(exp) || !st.Holder.LastTick.Equal(tick) {
		t.Errorf("status after renew and tick: %+v", st.Holder)
	}

	mustRelease(t, l)
	if err := l.Release(ctx); err != nil {
		t.Errorf("second Release: %v", err)
	}
	if _, err := l.Renew(ctx); !errors.Is(err, store.ErrLost) {
		t.Errorf("Renew after Release: %v, want ErrLost", err)
	}
	if st := mustStatus(t, s, "deploy:staging"); st.State != store.Free || st.Holder != nil || len(st.Waiters) != 0 {
		t.Errorf("status after release: %+v", st)
	}
	assertModes(t, root)
}

// assertModes checks S9's modes: every directory 0700, every file 0600.
func assertModes(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			t.Error(err)
			return nil
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = fs.ModeDir | 0o700
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode(), want)
		}
		return nil
	})
}

func TestFencesIncreaseAcrossAcquisitionsAndReopen(t *testing.T) {
	s, root := newStore(t)
	var last uint64
	for range 3 {
		l := mustAcquire(t, s, "k", claim("a"))
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		mustRelease(t, l)
	}
	s.Close()
	if _, _, err := s.Acquire(t.Context(), "k", claim("a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire on a closed store: %v, want ErrClosed", err)
	}
	s2 := openAt(t, root)
	l := mustAcquire(t, s2, "k", claim("a"))
	if l.Fence() != last+1 {
		t.Errorf("fence after reopen = %d, want %d", l.Fence(), last+1)
	}
	mustRelease(t, l)
}

func TestLeaseOutlivesStoreClose(t *testing.T) {
	s, _ := newStore(t)
	l := mustAcquire(t, s, "k", claim("a"))
	s.Close()
	if _, err := l.Renew(t.Context()); err != nil {
		t.Errorf("Renew after the store closed: %v", err)
	}
	mustRelease(t, l)
}

func TestBusyWithoutWait(t *testing.T) {
	s, _ := newStore(t)
	l := mustAcquire(t, s, "k", claim("first"))
	defer mustRelease(t, l)
	l2, h, err := s.Acquire(t.Context(), "k", claim("second"))
	if err != nil || l2 != nil {
		t.Fatalf("second Acquire = %v, %v; want busy", l2, err)
	}
	if h == nil || h.Name != "first" || h.PID != os.Getpid() || h.Fence != 1 {
		t.Errorf("busy holder = %+v", h)
	}
}

func TestStatusOfUnknownKeyCreatesNothing(t *testing.T) {
	s, root := newStore(t)
	st := mustStatus(t, s, "never/used")
	if st.State != store.Free || st.Holder != nil || st.Waiters == nil || len(st.Waiters) != 0 || st.Key != "never/used" {
		t.Errorf("status of an unknown key: %+v", st)
	}
	for _, f := range []func() (bool, error){
		func() (bool, error) { return s.Revoke(t.Context(), "never/used", store.Which{}) },
		func() (bool, error) { return s.Cancel(t.Context(), "never/used", store.Which{}) },
	} {
		if done, err := f(); done || err != nil {
			t.Errorf("revoke or cancel of an unknown key = %v, %v", done, err)
		}
	}
	if _, err := os.Lstat(keyPath(root, "never/used")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("key directory after status: %v, want none", err)
	}
}

func TestListAndStatusAgree(t *testing.T) {
	clk := newClock()
	s, _ := newStore(t, Options{Now: clk.now})
	held := mustAcquire(t, s, "b/held", claim("h"))
	defer mustRelease(t, held)
	mustRelease(t, mustAcquire(t, s, "a/free", claim("f")))
	list, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != "a/free" || list[0].State != store.Free || list[1].Key != "b/held" ||
		list[1].State != store.Held || list[1].Holder.Name != "h" {
		t.Errorf("List = %+v", list)
	}
	clk.add(2 * time.Minute)
	if st := mustStatus(t, s, "b/held"); st.State != store.Expired {
		t.Errorf("status past expiry = %s, want expired", st.State)
	}
}

func TestListManyKeys(t *testing.T) {
	s, root := newStore(t)
	const n = 300 // BenchmarkList10000 measures the real count
	makeFreeKeys(t, root, n)
	start := time.Now()
	list, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("List of %d keys took %v", n, time.Since(start))
	if len(list) != n {
		t.Fatalf("List returned %d keys, want %d", len(list), n)
	}
	for i, st := range list {
		if st.State != store.Free || st.Err != nil || i > 0 && list[i-1].Key >= st.Key {
			t.Fatalf("List[%d] = %+v (not free, or out of order)", i, st)
		}
	}
}

// makeFreeKeys lays down n free keys directly, as Acquire and Release
// would leave them, without n fsyncs.
func makeFreeKeys(t testing.TB, root string, n int) {
	t.Helper()
	for i := range n {
		kd := keyPath(root, "key/"+strings.Repeat("x", i%7)+itoa(i))
		if err := os.Mkdir(kd, 0o700); err != nil {
			t.Fatal(err)
		}
		r := record{Fence: uint64(i + 1), Version: 2}
		for _, f := range []struct {
			name string
			data []byte
		}{{"lease", r.marshal()}, {"guard", nil}, {"live", nil}} {
			if err := os.WriteFile(filepath.Join(kd, f.name), f.data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func itoa(i int) string { return strings.TrimLeft(formatSeq(uint64(i)), "0") + "." }
