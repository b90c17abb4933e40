package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// Many holders of one key (M1-M3), with real processes where a holder's
// death or its pid is the point.

// runManyHelper runs the helper modes of many holders:
//
//   - slot: acquire, say "acquired FENCE SLOT", say "lost" once a change
//     of the record is a lost lease, and release once stdin closes;
//   - many: FILESTORE_TEST_LOOPS times acquire, and inside leave a witness
//     in FILESTORE_TEST_SCRATCH: a file per slot made with O_EXCL (no two
//     holders share a slot), and one per holder, of which no holder may
//     see more than the claim allows (never more than N, an exclusive one
//     alone, a shared one never beside an exclusive one); then "done".
func runManyHelper(mode string, s *Store, key string, claim store.Claim) int {
	ctx := context.Background()
	if mode == "many" {
		n, _ := strconv.Atoi(os.Getenv("FILESTORE_TEST_LOOPS"))
		for range n {
			if err := witness(ctx, s, key, claim, os.Getenv("FILESTORE_TEST_SCRATCH")); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("done")
		return 0
	}
	l, _, err := s.Acquire(ctx, key, claim)
	if err != nil || l == nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("acquired", l.Fence(), l.Slot())
	go func() {
		for range l.Changes() {
			if _, err := l.Check(ctx); errors.Is(err, store.ErrLost) {
				fmt.Println("lost")
				return
			}
		}
	}()
	io.Copy(io.Discard, os.Stdin)
	if err := l.Release(ctx); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("released")
	return 0
}

// witness takes the lease once and checks, inside, who else is.
func witness(ctx context.Context, s *Store, key string, claim store.Claim, scratch string) error {
	l, _, err := s.Acquire(ctx, key, claim)
	if err != nil || l == nil {
		return fmt.Errorf("acquire: %v", err)
	}
	kind, n := store.KindOf(claim)
	me := filepath.Join(scratch, fmt.Sprintf("in-%d-%s", os.Getpid(), kind))
	slot := filepath.Join(scratch, fmt.Sprintf("slot-%d", l.Slot()))
	if kind == store.KindSlot {
		f, err := os.OpenFile(slot, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("two holders in slot %d: %v", l.Slot(), err)
		}
		f.Close()
	}
	if err := os.WriteFile(me, nil, 0o600); err != nil {
		return err
	}
	ents, err := os.ReadDir(scratch)
	if err != nil {
		return err
	}
	var in []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "in-") {
			in = append(in, e.Name())
		}
	}
	switch {
	case kind == store.KindSlot && len(in) > n:
		return fmt.Errorf("%d holders of %d slots at once: %v", len(in), n, in)
	case kind == store.KindExclusive && len(in) > 1:
		return fmt.Errorf("an exclusive holder beside others: %v", in)
	case kind == store.KindShared && slices.ContainsFunc(in, func(s string) bool { return strings.HasSuffix(s, "-exclusive") }):
		return fmt.Errorf("a shared holder beside an exclusive one: %v", in)
	}
	os.Remove(me)
	if kind == store.KindSlot {
		os.Remove(slot)
	}
	return l.Release(ctx)
}

// spawnSlot starts a "slot" helper with the claim's kind in env, and
// returns it once it holds: its fence and slot.
func spawnSlot(t *testing.T, root, key string, env ...string) (*testsupport.Helper, uint64, int) {
	t.Helper()
	h := spawn(t, "slot", root, key, env...)
	fence, slot := parseAcquired(t, h.Expect("acquired"))
	return h, fence, slot
}

func parseAcquired(t *testing.T, said string) (uint64, int) {
	t.Helper()
	f, s, _ := strings.Cut(said, " ")
	fence, err := strconv.ParseUint(f, 10, 64)
	slot, err2 := strconv.Atoi(s)
	if err != nil || err2 != nil {
		t.Fatalf("helper said acquired %q", said)
	}
	return fence, slot
}

func slotsClaim(name string, n int) store.Claim {
	c := claim(name)
	c.Slots = n
	return c
}

func sharedClaim(name string) store.Claim {
	c := claim(name)
	c.Shared = true
	return c
}

// waiting starts Acquire with c (waiting) on key in the background, once
// status shows it queued as the n-th waiter; its lease arrives on the
// channel.
func waiting(t *testing.T, s *Store, key string, c store.Claim, n int) <-chan store.Lease {
	t.Helper()
	got := make(chan store.Lease, 1)
	c.Wait = true
	go func() {
		l, _, err := s.Acquire(context.Background(), key, c)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		got <- l
	}()
	waitWaiters(t, s, key, n)
	return got
}

// notYet fails the test if a lease arrived on c.
func notYet(t *testing.T, c <-chan store.Lease, what string) {
	t.Helper()
	select {
	case l := <-c:
		t.Fatalf("%s acquired (fence %d) out of turn", what, l.Fence())
	default:
	}
}

func TestSlotHoldersTakeTheLowestFreeSlot(t *testing.T) {
	s, root := newStore(t)
	env := helperSlots + "=3"
	var hs []*testsupport.Helper
	var fences []uint64
	for i := range 3 {
		h, fence, slot := spawnSlot(t, root, "k", env)
		if slot != i {
			t.Fatalf("holder %d took slot %d, want %d", i, slot, i)
		}
		hs, fences = append(hs, h), append(fences, fence)
	}
	st := mustStatus(t, s, "k")
	if st.State != store.Held || st.Holder != nil || len(st.Holders) != 3 {
		t.Fatalf("status of 3 slot holders: %+v", st)
	}
	for i, h := range st.Holders {
		if h.Kind != store.KindSlot || h.Slots != 3 || h.Slot == nil || *h.Slot != i || h.PID != hs[i].Pid() || h.Fence != fences[i] {
			t.Errorf("holder %d: %+v (slot %v)", i, h, h.Slot)
		}
	}
	// A fourth waits, and takes the slot freed, above every fence.
	got := waiting(t, s, "k", slotsClaim("fourth", 3), 1)
	if w := mustStatus(t, s, "k").Waiters[0]; w.Kind != store.KindSlot || w.Slots != 3 {
		t.Errorf("waiter: %+v", w)
	}
	notYet(t, got, "a fourth holder of 3 slots")
	hs[1].Stdin.Close()
	hs[1].Expect("released")
	l := testsupport.Recv(t, got, "the fourth holder")
	defer mustRelease(t, l)
	if l.Slot() != 1 || l.Fence() <= slices.Max(fences) {
		t.Fatalf("the fourth holder has slot %d fence %d; want slot 1, fence above %v", l.Slot(), l.Fence(), fences)
	}
	for _, i := range []int{0, 2} {
		if line, said := hs[i].Said(); said {
			t.Errorf("holder of slot %d said %q", i, line)
		}
	}
}

func TestSlotProcessesNeverShareASlotNorExceedN(t *testing.T) {
	witnesses(t, func(int) []string { return []string{helperSlots + "=3"} })
}

func TestSharedAndExclusiveProcessesNeverMeet(t *testing.T) {
	witnesses(t, func(i int) []string {
		if i%2 == 0 {
			return []string{helperShared + "=1"}
		}
		return nil
	})
}

// witnesses runs 5 "many" helpers on one key, helper i with env(i), and
// fails the test unless each saw only what its claim allows.
func witnesses(t *testing.T, env func(i int) []string) {
	_, root := newStore(t)
	scratch := t.TempDir()
	var kids []*testsupport.Helper
	for i := range 5 {
		kids = append(kids, spawn(t, "many", root, "k", append(env(i), "FILESTORE_TEST_LOOPS=15", "FILESTORE_TEST_SCRATCH="+scratch)...))
	}
	for _, c := range kids {
		c.Expect("done")
		if err := c.Wait(); err != nil {
			t.Errorf("helper %d: %v", c.Pid(), err)
		}
	}
}

// A slot holder killed by SIGKILL frees its slot alone: the others keep
// theirs and renew, and the next taker of its slot gets its leftovers.
func TestKilledSlotHolderFreesOnlyItsSlot(t *testing.T) {
	s, root := newStore(t)
	l0 := mustAcquire(t, s, "k", slotsClaim("zero", 3))
	dead, deadFence, slot := spawnSlot(t, root, "k", helperSlots+"=3", helperMarker+"=marker-dead")
	l2 := mustAcquire(t, s, "k", slotsClaim("two", 3))
	if slot != 1 || l0.Slot() != 0 || l2.Slot() != 2 {
		t.Fatalf("slots %d, %d, %d; want 0, 1, 2", l0.Slot(), slot, l2.Slot())
	}
	dead.Kill()
	st := mustStatus(t, s, "k")
	if len(st.Holders) != 2 || *st.Holders[0].Slot != 0 || *st.Holders[1].Slot != 2 || st.Holders[1].Fence != l2.Fence() {
		t.Fatalf("holders after slot 1's died: %+v", st.Holders)
	}
	if len(st.Leftovers) != 1 || st.Leftovers[0].Marker != "marker-dead" {
		t.Errorf("leftovers after slot 1's died: %+v", st.Leftovers)
	}
	for _, l := range []store.Lease{l0, l2} {
		if _, err := l.Renew(t.Context()); err != nil {
			t.Fatalf("slot %d after slot 1's holder died: %v", l.Slot(), err)
		}
	}
	l1 := mustAcquire(t, s, "k", slotsClaim("one", 3))
	if l1.Slot() != 1 || l1.Fence() <= max(deadFence, l2.Fence()) {
		t.Fatalf("the next holder has slot %d fence %d", l1.Slot(), l1.Fence())
	}
	p := l1.Predecessor()
	if p == nil || p.PID != dead.Pid() || !slices.Equal(markers(p), []string{"marker-dead"}) {
		t.Fatalf("predecessor of slot 1's next holder: %+v", p)
	}
	if l0.Predecessor() != nil || l2.Predecessor() != nil {
		t.Error("a holder of another slot was given leftovers")
	}
	for _, l := range []store.Lease{l0, l1, l2} {
		mustRelease(t, l)
	}
}

// Revoking one holder, by slot or by pid, breaks its lease alone.
func TestRevokeOneHolderOfMany(t *testing.T) {
	s, root := newStore(t)
	l0 := mustAcquire(t, s, "k", slotsClaim("zero", 3))
	defer mustRelease(t, l0)
	byPID, _, _ := spawnSlot(t, root, "k", helperSlots+"=3")
	other, _, _ := spawnSlot(t, root, "k", helperSlots+"=3")
	one := 1
	if ok, err := s.Revoke(t.Context(), "k", store.Which{Slot: &one}); !ok || err != nil {
		t.Fatalf("Revoke slot 1 = %v, %v", ok, err)
	}
	byPID.Expect("lost")
	if ok, err := s.Revoke(t.Context(), "k", store.Which{PID: other.Pid()}); !ok || err != nil {
		t.Fatalf("Revoke pid %d = %v, %v", other.Pid(), ok, err)
	}
	other.Expect("lost")
	if _, err := l0.Renew(t.Context()); err != nil {
		t.Fatalf("slot 0 after the others were revoked: %v", err)
	}
	if req, err := l0.Check(t.Context()); err != nil || req != store.RequestNone {
		t.Fatalf("slot 0's check: %v, %v", req, err)
	}
	five := 5
	if ok, err := s.Revoke(t.Context(), "k", store.Which{Slot: &five}); ok || err != nil {
		t.Fatalf("Revoke of an empty slot = %v, %v", ok, err)
	}
	// A revoked holder keeps its slot until it lets go.
	if l, h, err := s.Acquire(t.Context(), "k", slotsClaim("newcomer", 3)); l != nil || h == nil || err != nil {
		t.Fatalf("Acquire beside revoked holders still stopping = %v, %+v, %v; want busy", l, h, err)
	}
	byPID.Stdin.Close()
	byPID.Expect("released")
	l1 := mustAcquire(t, s, "k", slotsClaim("newcomer", 3))
	defer mustRelease(t, l1)
	if l1.Slot() != 1 || l1.Predecessor() != nil {
		t.Fatalf("after the revoked holder released: slot %d, predecessor %+v", l1.Slot(), l1.Predecessor())
	}
}

func TestCancelOneHolderOfMany(t *testing.T) {
	s, _ := newStore(t)
	l0 := mustAcquire(t, s, "k", slotsClaim("zero", 2))
	defer mustRelease(t, l0)
	l1 := mustAcquire(t, s, "k", slotsClaim("one", 2))
	defer mustRelease(t, l1)
	one := 1
	if ok, err := s.Cancel(t.Context(), "k", store.Which{Slot: &one}); !ok || err != nil {
		t.Fatalf("Cancel slot 1 = %v, %v", ok, err)
	}
	changed(t, l1, "a cancel request")
	if req, err := l1.Check(t.Context()); err != nil || req != store.RequestCancel {
		t.Fatalf("slot 1's check: %v, %v", req, err)
	}
	if req, err := l0.Check(t.Context()); err != nil || req != store.RequestNone {
		t.Fatalf("slot 0's check: %v, %v", req, err)
	}
	st := mustStatus(t, s, "k")
	if st.Holders[0].Cancel || !st.Holders[1].Cancel {
		t.Errorf("cancel requested: %+v", st.Holders)
	}
}

// Shared holders hold together, an exclusive one alone, in arrival order
// across both kinds: in the order S S X S the last S waits for X (no
// writer starvation), and shared waiters in a row start together.
func TestSharedHoldersAndTheNoStarvationOrder(t *testing.T) {
	s, _ := newStore(t)
	s1 := mustAcquire(t, s, "k", sharedClaim("s1"))
	s2 := mustAcquire(t, s, "k", sharedClaim("s2"))
	if s1.Slot() != -1 || s2.Slot() != -1 {
		t.Fatalf("shared holders' slots %d, %d; want -1", s1.Slot(), s2.Slot())
	}
	st := mustStatus(t, s, "k")
	if st.Holder != nil || len(st.Holders) != 2 || st.Holders[0].Kind != store.KindShared || st.Holders[0].Slot != nil || st.Holders[0].Fence != s1.Fence() {
		t.Fatalf("status of two shared holders: %+v", st)
	}
	x := waiting(t, s, "k", claim("x"), 1)
	s3 := waiting(t, s, "k", sharedClaim("s3"), 2)
	s4 := waiting(t, s, "k", sharedClaim("s4"), 3)
	if w := mustStatus(t, s, "k").Waiters; w[0].Kind != store.KindExclusive || w[1].Kind != store.KindShared {
		t.Fatalf("waiters: %+v", w)
	}
	if l, h, err := s.Acquire(t.Context(), "k", sharedClaim("rude")); l != nil || h == nil || err != nil {
		t.Fatalf("a shared claim past a waiting exclusive one = %v, %+v, %v; want busy", l, h, err)
	}
	mustRelease(t, s1)
	notYet(t, x, "the exclusive waiter beside a shared holder")
	mustRelease(t, s2)
	xl := testsupport.Recv(t, x, "the exclusive waiter")
	notYet(t, s3, "a shared waiter behind the exclusive one")
	if st := mustStatus(t, s, "k"); st.Holder == nil || st.Holder.Kind != store.KindExclusive || len(st.Holders) != 1 {
		t.Fatalf("status of an exclusive holder: %+v", st)
	}
	mustRelease(t, xl)
	// Both shared waiters start, together.
	l3 := testsupport.Recv(t, s3, "the first shared waiter")
	l4 := testsupport.Recv(t, s4, "the second shared waiter")
	if st := mustStatus(t, s, "k"); len(st.Holders) != 2 || len(st.Waiters) != 0 {
		t.Fatalf("status of the two shared waiters that started: %+v", st)
	}
	if l3.Fence() <= xl.Fence() || l4.Fence() <= l3.Fence() {
		t.Errorf("fences %d, %d, %d do not rise in arrival order", xl.Fence(), l3.Fence(), l4.Fence())
	}
	mustRelease(t, l3)
	mustRelease(t, l4)
}

func TestAKindThatDiffersIsErrSlots(t *testing.T) {
	s, _ := newStore(t)
	l := mustAcquire(t, s, "k", slotsClaim("three", 3))
	defer mustRelease(t, l)
	for _, c := range []store.Claim{slotsClaim("two", 2), claim("exclusive"), sharedClaim("shared")} {
		for _, wait := range []bool{false, true} {
			c.Wait = wait
			_, _, err := s.Acquire(t.Context(), "k", c)
			if !errors.Is(err, store.ErrSlots) || !strings.Contains(err.Error(), "--slots 3") {
				t.Errorf("%s (wait %v) beside --slots 3: %v; want ErrSlots naming both", c.Name, wait, err)
			}
		}
	}
	if st := mustStatus(t, s, "k"); len(st.Waiters) != 0 {
		t.Errorf("a refused claim left a waiter: %+v", st.Waiters)
	}
	// The same against a waiter: an exclusive holder, a shared waiter.
	x := mustAcquire(t, s, "x", claim("x"))
	got := waiting(t, s, "x", sharedClaim("s"), 1)
	if _, _, err := s.Acquire(t.Context(), "x", slotsClaim("slots", 2)); !errors.Is(err, store.ErrSlots) {
		t.Errorf("--slots 2 on a key with an exclusive holder and a shared waiter: %v", err)
	}
	mustRelease(t, x)
	mustRelease(t, testsupport.Recv(t, got, "the shared waiter"))
}

// A dead waiter in a queue of slot waiters loses its place at once.
func TestDeadSlotWaiterLosesItsPlace(t *testing.T) {
	s, root := newStore(t)
	l0 := mustAcquire(t, s, "k", slotsClaim("zero", 2))
	l1 := mustAcquire(t, s, "k", slotsClaim("one", 2))
	defer mustRelease(t, l1)
	dead := spawn(t, "slot", root, "k", helperSlots+"=2")
	waitWaiters(t, s, "k", 1)
	got := waiting(t, s, "k", slotsClaim("second", 2), 2)
	dead.Kill()
	if st := mustStatus(t, s, "k"); len(st.Waiters) != 1 || st.Waiters[0].Name != "second" {
		t.Fatalf("waiters after the first died: %+v", st.Waiters)
	}
	mustRelease(t, l0)
	l := testsupport.Recv(t, got, "the second waiter")
	defer mustRelease(t, l)
	if l.Slot() != 0 {
		t.Fatalf("the second waiter took slot %d, want 0", l.Slot())
	}
}

// An exclusive holder runs alone: it inherits the leftovers of every dead
// holder of the key, whatever their slot, and no later holder does again.
func TestExclusiveTakerGetsADeadSharedHoldersLeftovers(t *testing.T) {
	s, root := newStore(t)
	s0 := mustAcquire(t, s, "k", sharedClaim("s0"))
	dead, _, _ := spawnSlot(t, root, "k", helperShared+"=1", helperMarker+"=marker-dead")
	dead.Kill()
	mustRelease(t, s0)
	x := mustAcquire(t, s, "k", claim("x"))
	p := x.Predecessor()
	if p == nil || p.PID != dead.Pid() || !slices.Equal(markers(p), []string{"marker-dead"}) {
		t.Fatalf("the exclusive taker's predecessor: %+v", p)
	}
	if err := x.LeftoversStopped(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, x)
	if st := mustStatus(t, s, "k"); len(st.Leftovers) != 0 {
		t.Errorf("leftovers after they were stopped: %+v", st.Leftovers)
	}
	for _, c := range []store.Claim{sharedClaim("a"), sharedClaim("b")} {
		l := mustAcquire(t, s, "k", c)
		defer mustRelease(t, l)
		if l.Predecessor() != nil {
			t.Errorf("%s was given leftovers already stopped: %+v", c.Name, l.Predecessor())
		}
	}
}

// Prune removes free slots' directories, and then the free key; the
// history names each slot holding's slot.
func TestPruneRemovesFreeSlotsAndHistoryNamesSlots(t *testing.T) {
	s, root := newStore(t)
	var ls []store.Lease
	for i := range 3 {
		ls = append(ls, mustAcquire(t, s, "k", slotsClaim(fmt.Sprint(i), 3)))
	}
	hs, err := s.History(t.Context(), "k", 0)
	if err != nil || len(hs) != 3 || hs[2].Slot == nil || *hs[2].Slot != 2 {
		t.Fatalf("history of 3 slot holders: %+v, %v", hs, err)
	}
	mustRelease(t, ls[0])
	mustRelease(t, ls[2])
	if _, err := s.Prune(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(keyPath(root, "k"), holdersDir, "2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a free slot's directory after Prune: %v", err)
	}
	if _, err := os.Stat(filepath.Join(keyPath(root, "k"), holdersDir, "1")); err != nil {
		t.Errorf("a held slot's directory after Prune: %v", err)
	}
	mustRelease(t, ls[1])
	if _, err := s.ForgetHistory(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Prune(t.Context()); err != nil || len(p) != 1 || p[0].What != "free key" {
		t.Fatalf("Prune of a free key that had slots = %+v, %v", p, err)
	}
}

// A slot directory moved away under its holder ends its lease, and no
// newcomer takes its slot while that holder runs (its claim).
func TestAMovedSlotDirectoryEndsItsLease(t *testing.T) {
	s, root := newStore(t)
	l0 := mustAcquire(t, s, "k", slotsClaim("zero", 2))
	defer mustRelease(t, l0)
	l1 := mustAcquire(t, s, "k", slotsClaim("one", 2))
	slot := filepath.Join(keyPath(root, "k"), holdersDir, "1")
	rename(t, slot, filepath.Join(keyPath(root, "k"), holdersDir, "9"))
	if _, err := l1.Renew(t.Context()); !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), "slot directory") {
		t.Fatalf("renewal of a holder whose slot directory moved: %v; want ErrLost naming it", err)
	}
	if l, h, err := s.Acquire(t.Context(), "k", slotsClaim("newcomer", 2)); l != nil || h == nil || err != nil {
		t.Fatalf("Acquire while the moved holder runs = %v, %+v, %v; want busy", l, h, err)
	}
	if _, err := l0.Renew(t.Context()); err != nil {
		t.Fatalf("slot 0 beside a moved slot: %v", err)
	}
	mustRelease(t, l1)
	rename(t, filepath.Join(keyPath(root, "k"), holdersDir, "9"), filepath.Join(t.TempDir(), "away"))
	l := mustAcquire(t, s, "k", slotsClaim("newcomer", 2))
	defer mustRelease(t, l)
	if l.Slot() != 1 {
		t.Fatalf("newcomer took slot %d, want 1", l.Slot())
	}
}

// Records and queue entries of an earlier fencerun have no kind: they
// are exclusive.
func TestRecordsWithoutAKindAreExclusive(t *testing.T) {
	r, err := parseRecord([]byte(`{"schema":1,"fence":3,"version":6,"token":"0123456789abcdef0123456789abcdef","holder":{"pid":7}}`), "lease")
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Holder.holder(r.Fence); h.Kind != store.KindExclusive || h.Slot != nil || h.Slots != 0 {
		t.Errorf("holder of a record without a kind: %+v", h)
	}
	w, err := parseWaiter([]byte(`{"schema":1,"pid":7}`), "entry")
	if err != nil {
		t.Fatal(err)
	}
	if h := w.holder(); h.Kind != store.KindExclusive {
		t.Errorf("waiter of an entry without a kind: %+v", h)
	}
}

// Prune removes free slots' directories while slot holders come and go:
// never two in a slot, never more than N, no fence handed out twice.
func TestPruneRacesSlotHolders(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	errs := make(chan error, 16)
	stop := pruneAll(s, errs)
	var mu sync.Mutex
	inside := map[int]bool{}
	fences := map[uint64]bool{}
	var workers sync.WaitGroup
	for range 5 {
		workers.Go(func() {
			for range 60 {
				c := slotsClaim("w", 2)
				c.Wait = true
				l, _, err := s.Acquire(ctx, "k", c)
				if err != nil || l == nil {
					errs <- fmt.Errorf("acquire: %v", err)
					return
				}
				mu.Lock()
				if inside[l.Slot()] || len(inside) >= 2 || fences[l.Fence()] {
					errs <- fmt.Errorf("slot %d fence %d taken beside %v", l.Slot(), l.Fence(), inside)
				}
				inside[l.Slot()], fences[l.Fence()] = true, true
				mu.Unlock()
				mu.Lock()
				delete(inside, l.Slot())
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
}
