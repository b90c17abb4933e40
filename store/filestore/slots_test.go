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

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// Through the real write path: a renewal whose pwrite fails after any
// number of bytes (a full disk, an I/O error) reports the path and the
// cause, leaves the lease's record as it was (never torn), and the lease
// goes on.
func TestRenewalCutShortLeavesTheRecordBefore(t *testing.T) {
	s, root := newStore(t)
	l := mustAcquire(t, s, "k", claim("a"))
	defer mustRelease(t, l)
	path := filepath.Join(keyPath(root, "k"), leaseFile)
	defer func(w func(int, []byte, int64) (int, error)) { statefs.SlotWrite = w }(statefs.SlotWrite)
	var cut, whole int
	var written []byte
	statefs.SlotWrite = func(fd int, b []byte, off int64) (int, error) {
		whole, written = len(b), b
		if n := min(cut, len(b)-1); n > 0 {
			if _, err := unix.Pwrite(fd, b[:n], off); err != nil {
				return 0, err
			}
		}
		return 0, unix.ENOSPC
	}
	for cut = 0; whole == 0 || cut < whole; cut++ {
		before, _ := os.ReadFile(path)
		want, _ := statefs.ParseSlotted(before, path)
		_, rerr := l.Renew(t.Context())
		after, _ := os.ReadFile(path)
		got, err := statefs.ParseSlotted(after, path)
		switch {
		case err != nil:
			t.Fatalf("cut %d: record after the write: %v", cut, err)
		case bytes.Equal(got.Data, want.Data):
			if !errors.Is(rerr, unix.ENOSPC) || !strings.Contains(rerr.Error(), path) {
				t.Fatalf("cut %d: renewal error %v; want ENOSPC naming %s", cut, rerr, path)
			}
		case bytes.Equal(got.Data, written[statefs.SlotHeader:]):
			// The bytes the cut left out were there already (the same
			// tail from an earlier record): the write landed whole, and
			// counts as done.
			if rerr != nil {
				t.Fatalf("cut %d: the record landed whole, yet the renewal failed: %v", cut, rerr)
			}
		default:
			t.Fatalf("cut %d: record after the write %q; want the one before or the new one", cut, got.Data)
		}
	}
	statefs.SlotWrite = func(fd int, b []byte, off int64) (int, error) { return unix.Pwrite(fd, b, off) }
	if _, err := l.Renew(t.Context()); err != nil {
		t.Fatalf("renewal after the failed ones: %v", err)
	}
	if st := mustStatus(t, s, "k"); st.State != store.Held || st.Holder.Name != "a" {
		t.Fatalf("status: %+v", st)
	}
}

// A record that outgrows its slot is made whole again with larger slots.
func TestARecordOutgrowingItsSlotIsRewrittenWhole(t *testing.T) {
	s, root := newStore(t)
	l := mustAcquire(t, s, "k", store.Claim{Name: strings.Repeat("n", 1000), Reason: strings.Repeat("\x01", 1000), TTL: 60e9})
	defer mustRelease(t, l)
	for range 3 {
		if _, err := l.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(keyPath(root, "k"), leaseFile))
	if err != nil || fi.Size() <= 2*statefs.MinSlotSize {
		t.Fatalf("record file %v, %v; want slots larger than %d", fi, err, statefs.MinSlotSize)
	}
	if st := mustStatus(t, s, "k"); st.Holder == nil || st.Holder.Reason != strings.Repeat("\x01", 1000) {
		t.Fatalf("status after growing: %+v", st)
	}
}

// Prune removes free keys' directories while acquirers come and go on the
// same keys: nobody is ever inside twice, every fence is above every
// earlier one, and an acquirer that opened a directory Prune then removed
// starts over in a new one.
func TestPruneRacesAcquirers(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	errs := make(chan error, 8)
	stop := pruneAll(s, errs)
	var mu sync.Mutex
	inside := map[string]bool{}
	var fences []uint64
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Go(func() {
			key := fmt.Sprintf("k%d", w%2)
			for range 150 {
				l, h, err := s.Acquire(ctx, key, store.Claim{Name: "w", TTL: 60e9, Wait: true})
				if err != nil || l == nil {
					errs <- fmt.Errorf("acquire %s: %v (holder %v)", key, err, h)
					return
				}
				mu.Lock()
				if inside[key] {
					errs <- fmt.Errorf("two holders of %s at once", key)
				}
				inside[key] = true
				fences = append(fences, l.Fence())
				mu.Unlock()
				mu.Lock()
				inside[key] = false
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	workers.Wait()
	stop()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[uint64]bool{}
	for _, f := range fences {
		if seen[f] {
			t.Fatalf("fence %d handed out twice", f)
		}
		seen[f] = true
	}
}

// pruneAll prunes s again and again, its error to errs, until stop,
// which returns once it has.
func pruneAll(s *Store, errs chan<- error) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.Prune(context.Background()); err != nil {
				errs <- err
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// The two interleavings Prune's check is for, made by hand: an acquirer
// that opened the key's directory, or its guard, before Prune removed them.
func TestAGuardOfARemovedDirectoryIsNotTheKeys(t *testing.T) {
	s, _ := newStore(t)
	mustRelease(t, mustAcquire(t, s, "k", claim("a")))
	kd := mustKeyDir(t, s, "k")
	g, err := kd.OpenFile(guardFile, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(g)
	if _, err := s.ForgetHistory(t.Context(), "k"); err != nil { // else its history keeps the directory
		t.Fatal(err)
	}
	if p, err := s.Prune(t.Context()); err != nil || len(p) != 1 || p[0].What != "free key" {
		t.Fatalf("Prune = %+v, %v; want the free key removed", p, err)
	}
	if err := unix.Flock(g, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := s.guardLinked("k", kd, g); !errors.Is(err, errMoved) {
		t.Fatalf("the guard of a removed directory: %v, want errMoved", err)
	}
	if _, err := kd.LockFile(t.Context(), guardFile, true, unix.LOCK_EX); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("making a guard in a removed directory: %v, want ENOENT", err)
	}
	// Acquire starts over in a directory of its own, and the old guard's
	// lock excludes nobody.
	l := mustAcquire(t, s, "k", claim("b"))
	mustRelease(t, l)
}
