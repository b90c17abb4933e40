package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// waitWaiters waits until status shows n live waiters on key.
func waitWaiters(t testing.TB, s *Store, key string, n int) *store.Status {
	t.Helper()
	var st *store.Status
	testsupport.WaitFor(t, fmt.Sprintf("%d waiters on %q", n, key), func() bool {
		st = mustStatus(t, s, key)
		return len(st.Waiters) == n
	})
	return st
}

func TestWaitersExcludeEachOtherAndGoInArrivalOrder(t *testing.T) {
	s, _ := newStore(t)
	first := mustAcquire(t, s, "k", claim("first"))
	const n = 5
	wait := queueInOrder(t, s, "k", n)
	// A newcomer that does not wait respects the queue too.
	if l, h, err := s.Acquire(t.Context(), "k", claim("rude")); l != nil || err != nil || h == nil {
		t.Fatalf("Acquire without wait past a queue = %v, %+v, %v; want busy", l, h, err)
	}
	mustRelease(t, first)
	wait()
	if st := mustStatus(t, s, "k"); st.State != store.Free || len(st.Waiters) != 0 {
		t.Errorf("after all released: %+v", st)
	}
}

func TestProcessesExcludeEachOther(t *testing.T) {
	_, root := newStore(t)
	scratch := t.TempDir()
	var kids []*testsupport.Helper
	for range 3 {
		kids = append(kids, spawn(t, "loop", root, "shared", "FILESTORE_TEST_LOOPS=15", "FILESTORE_TEST_SCRATCH="+scratch))
	}
	for _, c := range kids {
		c.Expect("done")
		if err := c.Wait(); err != nil {
			t.Errorf("helper %d: %v", c.Pid(), err)
		}
	}
}

func TestCancelledWaiterLeavesNoEntry(t *testing.T) {
	s, root := newStore(t)
	holder := mustAcquire(t, s, "k", claim("holder"))
	defer mustRelease(t, holder)
	errGaveUp := errors.New("gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		c := claim("waiter")
		c.Wait = true
		_, _, err := s.Acquire(ctx, "k", c)
		done <- err
	}()
	waitWaiters(t, s, "k", 1)
	cancel(errGaveUp)
	if err := <-done; !errors.Is(err, errGaveUp) {
		t.Fatalf("cancelled waiter returned %v, want the cause %v", err, errGaveUp)
	}
	ents, err := os.ReadDir(keyPath(root, "k") + "/queue")
	if err != nil || len(ents) != 0 {
		t.Errorf("queue after a cancelled waiter: %v, %v; want empty", ents, err)
	}
}

func TestDeadWaiterLosesItsPlaceAtOnce(t *testing.T) {
	s, root := newStore(t)
	holder := mustAcquire(t, s, "k", claim("holder"))
	dead := spawn(t, "hold", root, "k")
	st := waitWaiters(t, s, "k", 1)
	if st.Waiters[0].PID != dead.Pid() {
		t.Fatalf("first waiter is %+v, want pid %d", st.Waiters[0], dead.Pid())
	}
	got := make(chan store.Lease, 1)
	go func() {
		c := claim("second")
		c.Wait = true
		l, _, err := s.Acquire(context.Background(), "k", c)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitWaiters(t, s, "k", 2)
	dead.Kill()
	// Its entry's lock died with it: it is no longer a waiter.
	if st := mustStatus(t, s, "k"); len(st.Waiters) != 1 || st.Waiters[0].Name != "second" {
		t.Fatalf("waiters after the first died: %+v", st.Waiters)
	}
	mustRelease(t, holder)
	l := <-got
	if l == nil {
		t.Fatal("second waiter got no lease")
	}
	defer mustRelease(t, l)
	if l.Predecessor() != nil {
		t.Errorf("predecessor after a clean release: %+v", l.Predecessor())
	}
	// The dead entry was removed by the handoff; the new holder's own
	// goes in the background (take), soon after.
	testsupport.WaitFor(t, "the queue to be empty after the handoff", func() bool {
		ents, err := os.ReadDir(keyPath(root, "k") + "/queue")
		return err == nil && len(ents) == 0
	})
}

// A probe of live by status or list must never make an acquirer see a
// holder that is not there: probes hold the guard shared, acquirers
// exclusive. The acquirer's side is done here by hand, as attempt does it,
// without the fsyncs, so the loop is fast enough to hit the window often.
func TestProbesNeverMakeAFreeKeyLookBusy(t *testing.T) {
	s, root := newStore(t)
	ctx := t.Context()
	mustRelease(t, mustAcquire(t, s, "k", claim("a")))
	kd := dir{Path: keyPath(root, "k")}
	var err error
	if kd.FD, err = unix.Open(kd.Path, unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
		t.Fatal(err)
	}
	defer kd.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Status(ctx, "k"); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.List(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	busy := 0
	for range 20000 {
		g, err := kd.LockFile(ctx, guardFile, false, unix.LOCK_EX)
		if err != nil {
			t.Fatal(err)
		}
		live, err := kd.OpenFile(liveFile, unix.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		if unix.Flock(live, unix.LOCK_EX|unix.LOCK_NB) != nil {
			busy++
		}
		unix.Close(live)
		unix.Close(g)
	}
	close(stop)
	wg.Wait()
	if busy > 0 {
		t.Errorf("a free key looked busy to %d of 20000 acquirers", busy)
	}
}

// The command must inherit nothing of the store: every descriptor it
// opens is close-on-exec.
func TestDescriptorsAreNotInherited(t *testing.T) {
	s, root := newStore(t)
	l := mustAcquire(t, s, "k", claim("holder"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := claim("waiter")
		c.Wait = true
		if l, _, err := s.Acquire(context.Background(), "k", c); err == nil && l != nil {
			l.Release(context.Background())
		}
	}()
	waitWaiters(t, s, "k", 1)
	out, err := exec.Command("ls", "-l", "/proc/self/fd/").CombinedOutput()
	if err != nil {
		t.Fatalf("ls: %v: %s", err, out)
	}
	if strings.Contains(string(out), root) || strings.Contains(string(out), "socket:") {
		t.Errorf("a child process inherited store descriptors:\n%s", out)
	}
	mustRelease(t, l)
	<-done
}

// A new holder's own queue entry is removed in the background (take):
// status never shows the holder as a waiter meanwhile, and a waiter that
// comes after never gets that entry's name, so status never hides it.
func TestTheNewHoldersEntryIsNeitherShownNorReused(t *testing.T) {
	s, root := newStore(t)
	ctx := t.Context()
	first := mustAcquire(t, s, "k", claim("first"))
	waitFor := func(name string) <-chan store.Lease {
		got := make(chan store.Lease, 1)
		go func() {
			c := claim(name)
			c.Wait = true
			l, _, err := s.Acquire(ctx, "k", c)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		return got
	}
	second := waitFor("second")
	waitWaiters(t, s, "k", 1)
	mustRelease(t, first)
	l := <-second
	if st := mustStatus(t, s, "k"); st.Holder == nil || st.Holder.Name != "second" || len(st.Waiters) != 0 {
		t.Fatalf("status right after the handoff: holder %+v, waiters %+v; want second holding, nobody waiting", st.Holder, st.Waiters)
	}
	testsupport.WaitFor(t, "the new holder's entry to go", func() bool {
		ents, err := os.ReadDir(keyPath(root, "k") + "/queue")
		return err == nil && len(ents) == 0
	})
	third := waitFor("third")
	if st := waitWaiters(t, s, "k", 1); st.Waiters[0].Name != "third" {
		t.Fatalf("waiters %+v, want third", st.Waiters)
	}
	mustRelease(t, l)
	mustRelease(t, <-third)
}

// A new holder removes its queue entry in the background (take); until it
// is gone, status must not list the holder as a waiter of its own key, and
// must still list the waiter behind it (here in the same process, as a
// holder's command running `fencerun status` would not be).
func TestNewHolderIsNotListedAsItsOwnWaiter(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	first := mustAcquire(t, s, "k", claim("first"))
	// Set before the waiters start, restored after the last took the lease.
	held := make(chan struct{})
	removeOwnEntry = func(e *ownEntry) {
		<-held
		e.remove()
	}
	acquired := make(chan store.Lease, 2)
	wait := func(name string) {
		c := claim(name)
		c.Wait = true
		go func() {
			l, _, err := s.Acquire(ctx, "k", c)
			if err != nil {
				t.Errorf("Acquire(%s): %v", name, err)
			}
			acquired <- l
		}()
	}
	wait("second")
	waitWaiters(t, s, "k", 1)
	wait("third")
	waitWaiters(t, s, "k", 2)

	mustRelease(t, first)
	second := <-acquired
	if second == nil {
		close(held)
		<-acquired
		removeOwnEntry = (*ownEntry).remove
		t.FailNow()
	}
	st := mustStatus(t, s, "k")
	if st.State != store.Held || st.Holder.Name != "second" || len(st.Waiters) != 1 || st.Waiters[0].Name != "third" {
		t.Errorf("status while the new holder's entry is still there: %+v, waiters %+v; want second holding, third waiting", st, st.Waiters)
	}
	if all, err := s.List(ctx); err != nil || len(all) != 1 || len(all[0].Waiters) != 1 {
		t.Errorf("List while the new holder's entry is still there: %+v, %v; want one waiter", all, err)
	}
	close(held)
	mustRelease(t, second)
	third := <-acquired
	removeOwnEntry = (*ownEntry).remove
	if third != nil {
		mustRelease(t, third)
	}
}
