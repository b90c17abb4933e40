package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

func TestAdmission(t *testing.T) {
	x, s, s3, s2 := exclusive, kind{store.KindShared, 1}, kind{store.KindSlot, 3}, kind{store.KindSlot, 2}
	for _, tc := range []struct {
		queue []kind
		held  int
	}{
		{[]kind{x}, 1},
		{[]kind{x, x}, 1},
		{[]kind{s, s, s}, 3},
		{[]kind{s, s, x, s}, 2},
		{[]kind{x, s, s}, 1},
		{[]kind{s3, s3, s3, s3}, 3},
		{[]kind{s3, s3}, 2},
		{[]kind{s3, x, s3}, 1},
		{[]kind{x, s3, s3}, 1},
		{[]kind{s3, s2}, 1},
		{[]kind{s2, s2, s2}, 2},
	} {
		if got := holding(tc.queue); got != tc.held {
			t.Errorf("holding(%v) = %d, want %d", tc.queue, got, tc.held)
		}
	}
	many := make([]kind, store.MaxSlots+1)
	for i := range many {
		many[i] = s
	}
	if got := holding(many); got != store.MaxSlots {
		t.Errorf("%d shared contenders: %d hold, want %d", len(many), got, store.MaxSlots)
	}
}

// threeClients is a store on a fresh cluster and three clients of it
// (itself the first), as three hosts' fencerun would be.
func threeClients(t *testing.T) (*Store, []store.Store) {
	s0, c := newStore(t)
	clients := []store.Store{s0}
	for range 2 {
		s, err := openEndpoints(c.Endpoints())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		clients = append(clients, s)
	}
	return s0, clients
}

// slotClaim is a claim of n slots (0: shared).
func slotClaim(name string, n int) store.Claim {
	return store.Claim{Name: name, TTL: 10 * time.Second, Wait: true, Slots: n, Shared: n == 0}
}

// acquired is what a waiting Acquire returned.
type acquired struct {
	l   store.Lease
	err error
}

// acquireLater starts a waiting Acquire and returns where it answers;
// the lease is released at the test's end.
func acquireLater(t *testing.T, s store.Store, key string, c store.Claim) <-chan acquired {
	t.Helper()
	got := make(chan acquired, 1)
	go func() {
		l, _, err := s.Acquire(t.Context(), key, c)
		if l != nil {
			t.Cleanup(func() { l.Release(context.Background()) })
		}
		got <- acquired{l, err}
	}()
	return got
}

func mustHold(t *testing.T, c <-chan acquired, what string) store.Lease {
	t.Helper()
	a := testsupport.Recv(t, c, what)
	if a.err != nil || a.l == nil {
		t.Fatalf("%s: %v", what, a.err)
	}
	return a.l
}

// notYet fails if c has answered.
func notYet(t *testing.T, c <-chan acquired, what string) {
	t.Helper()
	select {
	case a := <-c:
		t.Fatalf("%s acquired (%v, %v) while it must wait", what, a.l, a.err)
	default:
	}
}

func waitStatus(t *testing.T, s store.Store, key, what string, ok func(*store.Status) bool) *store.Status {
	t.Helper()
	var st *store.Status
	testsupport.WaitFor(t, what, func() bool {
		var err error
		st, err = s.Status(t.Context(), key)
		return err == nil && ok(st)
	})
	return st
}

func waiters(n int) func(*store.Status) bool {
	return func(st *store.Status) bool { return len(st.Waiters) == n }
}

// N=3 from three store clients (as three hosts' fencerun would be): the
// first three hold at once in slots 0, 1 and 2, a fourth without Wait is
// told who holds, one with Wait waits, and the lowest freed slot goes to
// it. Status lists every holder by slot, and no exclusive Holder.
func TestSlotsFillLowestFirst(t *testing.T) {
	s0, clients := threeClients(t)
	var ls []store.Lease
	var last uint64
	for i := range 3 {
		l := acquireNow(t, clients[i].(*Store), "sem", slotClaim(fmt.Sprint("h", i), 3))
		if l.Slot() != i || l.Fence() <= last {
			t.Fatalf("holder %d: slot %d fence %d (last %d); want slot %d and a higher fence", i, l.Slot(), l.Fence(), last, i)
		}
		last = l.Fence()
		ls = append(ls, l)
	}
	c4 := slotClaim("busy", 3)
	c4.Wait = false
	if l, h, err := s0.Acquire(t.Context(), "sem", c4); l != nil || err != nil || h == nil || h.Name != "h0" {
		t.Fatalf("a fourth without wait: %v, %+v, %v; want told h0 holds", l, h, err)
	}
	st, err := s0.Status(t.Context(), "sem")
	if err != nil || st.State != store.Held || st.Holder != nil || len(st.Holders) != 3 || len(st.Waiters) != 0 {
		t.Fatalf("status: %v %+v; want 3 holders, no exclusive holder, no waiter", err, st)
	}
	for i, h := range st.Holders {
		if h.Kind != store.KindSlot || h.Slots != 3 || h.Slot == nil || *h.Slot != i || h.Fence != ls[i].Fence() || h.Expires.IsZero() {
			t.Errorf("holder %d in status: %+v", i, h)
		}
	}
	w := acquireLater(t, clients[2], "sem", slotClaim("w", 3))
	waitStatus(t, s0, "sem", "a waiter", waiters(1))
	release := func(i int) {
		if err := ls[i].Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	release(2)
	release(1)
	l := mustHold(t, w, "the waiter")
	if l.Slot() != 1 && l.Slot() != 2 || l.Fence() <= last {
		t.Fatalf("waiter: slot %d fence %d; want a freed slot, fence over %d", l.Slot(), l.Fence(), last)
	}
	// Both 1 and 2 may be free when it claims; then it took 1.
	next := acquireNow(t, s0, "sem", slotClaim("next", 3))
	if got := []int{l.Slot(), next.Slot()}; !(got[0] == 1 && got[1] == 2 || got[0] == 2 && got[1] == 1) {
		t.Fatalf("slots after 1 and 2 were freed: %v", got)
	}
	release(0)
	if l := acquireNow(t, s0, "sem", slotClaim("zero", 3)); l.Slot() != 0 {
		t.Fatalf("slot 0 freed, then taken as slot %d", l.Slot())
	}
	hist, err := s0.History(t.Context(), "sem", 0)
	if err != nil || len(hist) != 6 || hist[0].Slot == nil || *hist[0].Slot != 0 || hist[5].Slot == nil || *hist[5].Slot != 0 {
		t.Fatalf("history %v: %+v; want 6 holdings with their slots", err, hist)
	}
}

// Nine contenders on three clients churn through N=3: a witness per slot
// proves that no two holders share a slot, and a count that never more
// than three hold at once; fences are all different.
func TestSlotsWitness(t *testing.T) {
	_, clients := threeClients(t)
	const n, rounds = 3, 4
	var (
		mu      sync.Mutex
		in      [n]int // who is in each slot, +1
		holding int
		most    int
		fences  = map[uint64]bool{}
		wg      sync.WaitGroup
	)
	for w := range 9 {
		wg.Go(func() {
			s := clients[w%len(clients)]
			for r := range rounds {
				l, _, err := s.Acquire(t.Context(), "witness", slotClaim(fmt.Sprint(w, "/", r), n))
				if err != nil || l == nil {
					t.Errorf("contender %d: %v", w, err)
					return
				}
				mu.Lock()
				slot := l.Slot()
				if slot < 0 || slot >= n || in[slot] != 0 || fences[l.Fence()] {
					t.Errorf("contender %d took slot %d (held by %d), fence %d (seen %v)", w, slot, in[max(0, min(slot, n-1))]-1, l.Fence(), fences[l.Fence()])
				}
				in[max(0, min(slot, n-1))] = w + 1
				fences[l.Fence()] = true
				holding++
				most = max(most, holding)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // the work: others queue meanwhile
				mu.Lock()
				in[max(0, min(slot, n-1))] = 0
				holding--
				mu.Unlock()
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("contender %d release: %v", w, err)
				}
			}
		})
	}
	wg.Wait()
	if most > n || len(fences) != 9*rounds {
		t.Fatalf("at most %d held at once (want <= %d), %d fences for %d holdings", most, n, len(fences), 9*rounds)
	}
	t.Logf("at most %d of %d slots held at once", most, n)
}

// Shared holders hold together; an exclusive claim waits for all of them
// and holds alone; a shared claim that queued behind it waits for it (no
// writer starvation): S S X S.
func TestSharedAndExclusiveOrder(t *testing.T) {
	s, _ := newStore(t)
	s1 := acquireNow(t, s, "rw", slotClaim("s1", 0))
	s2 := acquireNow(t, s, "rw", slotClaim("s2", 0))
	if s1.Slot() != -1 || s2.Slot() != -1 {
		t.Fatalf("shared slots %d, %d; want -1", s1.Slot(), s2.Slot())
	}
	x := acquireLater(t, s, "rw", store.Claim{Name: "x", TTL: 10 * time.Second, Wait: true})
	waitStatus(t, s, "rw", "x waiting", waiters(1))
	s3 := acquireLater(t, s, "rw", slotClaim("s3", 0))
	st := waitStatus(t, s, "rw", "s3 waiting behind x", waiters(2))
	if len(st.Holders) != 2 || st.Holder != nil || st.Waiters[0].Kind != store.KindExclusive || st.Waiters[1].Kind != store.KindShared {
		t.Fatalf("status with S S X S: %+v", st)
	}
	if err := s1.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, "rw", "one shared holder", func(st *store.Status) bool { return len(st.Holders) == 1 })
	notYet(t, x, "x beside s2")
	if err := s2.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	xl := mustHold(t, x, "x")
	st = waitStatus(t, s, "rw", "x holding", func(st *store.Status) bool { return st.Holder != nil })
	if len(st.Holders) != 1 || st.Holder.Name != "x" || len(st.Waiters) != 1 {
		t.Fatalf("status with x holding: %+v", st)
	}
	s4 := acquireLater(t, s, "rw", slotClaim("s4", 0))
	waitStatus(t, s, "rw", "s3 and s4 waiting", waiters(2))
	notYet(t, s3, "s3 beside x")
	if err := xl.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Consecutive shared waiters start together.
	a, b := mustHold(t, s3, "s3"), mustHold(t, s4, "s4")
	if a.Fence() >= b.Fence() || a.Fence() <= xl.Fence() {
		t.Fatalf("fences x %d, s3 %d, s4 %d: want rising in queue order", xl.Fence(), a.Fence(), b.Fence())
	}
}

// A claim of another kind than the key's holders' or waiters' is refused
// with store.ErrSlots and leaves nothing on etcd; a foreign holder
// (etcdctl lock) refuses nobody: a slot claim waits behind it.
func TestSlotsMismatch(t *testing.T) {
	s, c := newStore(t)
	acquireNow(t, s, "m", slotClaim("three", 3))
	for _, cl := range []store.Claim{slotClaim("two", 2), slotClaim("shared", 0), {Name: "x", TTL: 10 * time.Second, Wait: true}} {
		l, _, err := s.Acquire(t.Context(), "m", cl)
		if !errors.Is(err, store.ErrSlots) || l != nil || !strings.Contains(err.Error(), "--slots 3") {
			t.Errorf("claim %+v beside --slots 3: %v; want ErrSlots naming --slots 3", cl, err)
		}
	}
	resp, err := s.c.Get(t.Context(), prefixOf("m"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 1 {
		t.Fatalf("contenders after refused claims: %d, %v; want the holder alone", resp.Count, err)
	}
	// A waiter's kind counts too: an exclusive holder, a shared waiter,
	// and a slot claim refused naming the holder.
	acquireNow(t, s, "w", store.Claim{Name: "x"})
	acquireLater(t, s, "w", slotClaim("sh", 0))
	waitStatus(t, s, "w", "a shared waiter", waiters(1))
	if _, _, err := s.Acquire(t.Context(), "w", slotClaim("four", 4)); !errors.Is(err, store.ErrSlots) {
		t.Fatalf("slot claim beside an exclusive holder: %v; want ErrSlots", err)
	}
	// A foreign contender: etcdctl's kind of key, on a lease of its own.
	cl := c.Client()
	g, err := cl.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(t.Context(), prefixOf("f")+leaseHex(g.ID), "", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	busy := slotClaim("busy", 3)
	busy.Wait = false
	if l, h, err := s.Acquire(t.Context(), "f", busy); l != nil || err != nil || h == nil || !h.Foreign {
		t.Fatalf("slot claim without wait behind a foreign holder: %v %+v %v; want told it holds", l, h, err)
	}
	w := acquireLater(t, s, "f", slotClaim("after", 3))
	waitStatus(t, s, "f", "a slot waiter behind the foreign holder", waiters(1))
	notYet(t, w, "slot claim behind a foreign holder")
	if _, err := cl.Revoke(t.Context(), g.ID); err != nil {
		t.Fatal(err)
	}
	if l := mustHold(t, w, "slot claim after the foreign holder"); l.Slot() != 0 {
		t.Fatalf("slot %d", l.Slot())
	}
}

// Revoke and Cancel pick holders by slot and by pid: only the picked one
// hears of it; the others keep their leases, and the revoked slot goes to
// the next waiter.
func TestRevokeCancelPick(t *testing.T) {
	s, c := newStore(t)
	ps := make([]*slotProc, 3)
	for i := range ps {
		ps[i] = startSlotProc(t, c.Endpoints(), "pick", 3, fmt.Sprint("M=pick", i))
		if slot := ps[i].acquired(); slot != i {
			t.Fatalf("helper %d took slot %d", i, slot)
		}
	}
	w := acquireLater(t, s, "pick", slotClaim("next", 3))
	waitStatus(t, s, "pick", "a waiter", waiters(1))
	one := 1
	if ok, err := s.Revoke(t.Context(), "pick", store.Which{Slot: &one}); !ok || err != nil {
		t.Fatalf("revoke slot 1: %v, %v", ok, err)
	}
	ps[1].Expect("lost")
	if l := mustHold(t, w, "the waiter"); l.Slot() != 1 {
		t.Fatalf("the waiter took slot %d after slot 1 was revoked", l.Slot())
	}
	if ok, err := s.Cancel(t.Context(), "pick", store.Which{PID: ps[2].Pid()}); !ok || err != nil {
		t.Fatalf("cancel pid %d: %v, %v", ps[2].Pid(), ok, err)
	}
	ps[2].Expect("cancelled")
	if ok, err := s.Revoke(t.Context(), "pick", store.Which{PID: ps[2].Pid()}); ok || err != nil {
		t.Fatalf("revoke of a pid that holds no more: %v, %v", ok, err)
	}
	if ok, err := s.Revoke(t.Context(), "pick", store.Which{PID: ps[0].Pid()}); !ok || err != nil {
		t.Fatalf("revoke pid %d: %v, %v", ps[0].Pid(), ok, err)
	}
	ps[0].Expect("lost")
	st, err := s.Status(t.Context(), "pick")
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Name != "next" {
		t.Fatalf("status after the picks: %v %+v; want the waiter alone", err, st)
	}
	hist, _ := s.History(t.Context(), "pick", 0)
	revoked := 0
	for _, h := range hist {
		if h.Ending != nil && h.Ending.How == store.EndRevoked {
			revoked++
		}
	}
	if revoked != 2 {
		t.Errorf("history has %d revoked holdings, want 2: %+v", revoked, hist)
	}
}

// A slot holder killed (SIGKILL) frees only its slot: the waiter behind
// takes that slot once its lease is gone (revoked by the waiter here, its
// process being dead), with the dead one's tree as its Predecessor, and
// the other holders keep theirs.
func TestSlotHolderKilled(t *testing.T) {
	s, c := newStore(t)
	ps := make([]*slotProc, 3)
	for i := range ps {
		ps[i] = startSlotProc(t, c.Endpoints(), "kill", 3, fmt.Sprint("M=kill", i))
		ps[i].acquired()
	}
	w := acquireLater(t, s, "kill", slotClaim("next", 3))
	waitStatus(t, s, "kill", "a waiter", waiters(1))
	ps[1].Kill()
	l := mustHold(t, w, "the waiter")
	if l.Slot() != 1 {
		t.Fatalf("the waiter took slot %d, want the dead holder's 1", l.Slot())
	}
	if p := l.Predecessor(); p == nil || p.PID != ps[1].Pid() || len(p.Leftovers) != 1 || p.Leftovers[0].Marker != "M=kill1" {
		t.Fatalf("predecessor %+v; want the dead holder's tree alone", p)
	}
	st, err := s.Status(t.Context(), "kill")
	if err != nil || len(st.Holders) != 3 {
		t.Fatalf("status: %v %+v", err, st)
	}
	for _, i := range []int{0, 2} {
		if _, said := ps[i].Said(); said {
			t.Errorf("holder %d said something: it lost its slot", i)
		}
		if st.Holders[i].PID != ps[i].Pid() {
			t.Errorf("slot %d is held by pid %d, want %d", i, st.Holders[i].PID, ps[i].Pid())
		}
	}
}

// The helper process of these tests (TestMain): a slot or shared holder
// that says "acquired FENCE SLOT", renews until its stdin closes (then
// releases and says "released"), and says "lost" (exit 3) or, asked to,
// "cancelled" after it released.
const envSlotHelper = "ESLOTS_HELPER"

func slotHelper(eps string) int {
	s, err := openEndpoints(eps)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	n, _ := strconv.Atoi(os.Getenv("ESLOTS_SLOTS"))
	ctx := context.Background()
	c := slotClaim("helper", n)
	c.Marker = os.Getenv("ESLOTS_MARKER")
	l, _, err := s.Acquire(ctx, os.Getenv("ESLOTS_KEY"), c)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("acquired", l.Fence(), l.Slot())
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
	for {
		select {
		case <-eof:
			l.Release(ctx)
			fmt.Println("released")
			return 0
		case <-time.After(c.TTL / 3):
			if _, err := l.Renew(ctx); err != nil {
				fmt.Println("lost")
				return 3
			}
		case <-l.Changes():
			req, err := l.Check(ctx)
			if err != nil {
				fmt.Println("lost")
				return 3
			}
			if req == store.RequestCancel {
				l.Release(ctx)
				fmt.Println("cancelled")
				return 0
			}
		}
	}
}

type slotProc struct{ *testsupport.Helper }

func startSlotProc(t *testing.T, eps, key string, slots int, marker string) *slotProc {
	t.Helper()
	return &slotProc{testsupport.StartHelper(t, envSlotHelper+"="+eps, "ESLOTS_KEY="+key,
		"ESLOTS_SLOTS="+strconv.Itoa(slots), "ESLOTS_MARKER="+marker)}
}

// acquired waits for the helper to hold, and returns its slot.
func (p *slotProc) acquired() int {
	f := strings.Fields(p.Expect("acquired "))
	slot, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		p.Kill()
	}
	return slot
}

// etcdctl lock K is exclusive against fencerun's slot holders (M4): slot
// claims wait behind its holder, and it waits behind every slot holder
// ahead of it until the last is gone.
func TestSlotsAndEtcdctlLock(t *testing.T) {
	if _, err := os.Stat(etcdctlBin); err != nil {
		etcdtest.Need(t)
		t.Skip("no etcdctl installed")
	}
	s, c := newStore(t)
	dir := t.TempDir()
	ctl := func(name string) {
		t.Helper()
		script := `touch "$1/$2.started"; while [ ! -e "$1/$2.go" ]; do sleep 0.01; done`
		cmd := exec.Command(etcdctlBin, "--endpoints", c.Endpoints(), "lock", "ctl", "--", "sh", "-c", script, "sh", dir, name)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		})
	}
	started := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name+".started"))
		return err == nil
	}
	goOn := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name+".go"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctl("ctl1")
	testsupport.WaitFor(t, "etcdctl holding", func() bool { return started("ctl1") })
	w0, w1 := acquireLater(t, s, "ctl", slotClaim("a", 2)), acquireLater(t, s, "ctl", slotClaim("b", 2))
	st := waitStatus(t, s, "ctl", "two slot waiters", waiters(2))
	if st.Holder == nil || !st.Holder.Foreign || len(st.Holders) != 1 {
		t.Fatalf("status with etcdctl holding: %+v", st)
	}
	notYet(t, w0, "a slot claim behind etcdctl")
	goOn("ctl1")
	a, b := mustHold(t, w0, "a"), mustHold(t, w1, "b")
	if a.Slot()+b.Slot() != 1 {
		t.Fatalf("slots %d and %d", a.Slot(), b.Slot())
	}
	ctl("ctl2")
	waitStatus(t, s, "ctl", "etcdctl waiting", waiters(1))
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, "ctl", "one slot holder left", func(st *store.Status) bool { return len(st.Holders) == 1 })
	if started("ctl2") {
		t.Fatal("etcdctl lock started beside a fencerun slot holder")
	}
	if err := b.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, "etcdctl holding after the slot holders", func() bool { return started("ctl2") })
	goOn("ctl2")
}

const etcdctlBin = "/usr/bin/etcdctl"

// A holder whose holder key was deleted (etcdctl del) has lost its lease,
// but its slot key stays on its lease until it lets go: a claim admitted
// meanwhile (fewer than N contenders) finds every slot taken and waits
// for a slot key's deletion, then takes the lowest.
func TestSlotKeyLingersUntilTheLostHolderLetsGo(t *testing.T) {
	s, _ := newStore(t)
	a := acquireNow(t, s, "linger", slotClaim("a", 2))
	acquireNow(t, s, "linger", slotClaim("b", 2))
	if _, err := s.c.Delete(t.Context(), a.(*Lease).myKey); err != nil {
		t.Fatal(err)
	}
	c := acquireLater(t, s, "linger", slotClaim("c", 2))
	// Admitted, and waiting for a slot: its key is the second under the
	// prefix, and a's slot key is still there.
	waitStatus(t, s, "linger", "c admitted", func(st *store.Status) bool { return len(st.Holders) == 2 })
	if _, err := a.Check(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Fatalf("a's check after its key was deleted: %v", err)
	}
	resp, err := s.c.Get(t.Context(), slotKey("linger", 0))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("a's slot key: %v, %v", resp, err)
	}
	notYet(t, c, "c while a's slot key stays")
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if l := mustHold(t, c, "c"); l.Slot() != 0 {
		t.Fatalf("c took slot %d, want a's 0", l.Slot())
	}
}

// Slot waiters recount on each deletion ahead from their watch, and read
// (take) only once admitted: 60 waiters behind three holders of N=3
// drain with at most two takes each (the recount is local; W waiters
// still get W watch events a release: the package comment's cost).
func TestSlotWaitersTakeOnlyWhenAdmitted(t *testing.T) {
	s, _ := newStore(t)
	const key, n, w = "drain", 3, 60
	var takes atomic.Int32
	afterTake = func(k string, held bool) {
		if k == key {
			takes.Add(1)
		}
	}
	t.Cleanup(func() { afterTake = nil })
	var hs []store.Lease
	for i := range n {
		hs = append(hs, acquireNow(t, s, key, slotClaim(fmt.Sprint("h", i), n)))
	}
	var wg sync.WaitGroup
	for i := range w {
		wg.Go(func() {
			l, _, err := s.Acquire(context.Background(), key, slotClaim(fmt.Sprint("w", i), n))
			if err != nil || l == nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
	}
	waitStatus(t, s, key, fmt.Sprint(w, " waiters"), waiters(w))
	for _, h := range hs {
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got := takes.Load(); got > 2*w {
		t.Errorf("%d slot waiters took %d times, want at most %d", w, got, 2*w)
	}
	t.Logf("%d slot waiters took %d times", w, takes.Load())
}

// A slot holder whose slot key is deleted (by hand: no fencerun does)
// has lost its slot, which another may take: its renewal and check fail
// with ErrLost, and its ReleaseDone marks nothing.
func TestDeletedSlotKeyLosesTheSlot(t *testing.T) {
	s, _ := newStore(t)
	acquireNow(t, s, "gone", slotClaim("a", 2))
	b := acquireNow(t, s, "gone", slotClaim("b", 2))
	if _, err := s.c.Delete(t.Context(), slotKey("gone", b.Slot())); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Renew(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Fatalf("renewal without the slot key: %v; want ErrLost", err)
	}
	if _, err := b.Check(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Fatalf("check without the slot key: %v; want ErrLost", err)
	}
	if err := b.ReleaseDone(t.Context(), "id"); !errors.Is(err, store.ErrLost) {
		t.Fatalf("ReleaseDone without the slot key: %v; want ErrLost", err)
	}
	if d, _ := s.Done(t.Context(), "gone"); len(d) != 0 {
		t.Fatalf("done after a lost slot's ReleaseDone: %+v", d)
	}
}

// A slot holder whose slot key is deleted hears of it at once, as of its
// holder key (E3): another may take that slot meanwhile, so waiting for
// the next renewal (TTL/3) would leave two commands in one slot.
func TestDeletedSlotKeyIsSeenAtOnce(t *testing.T) {
	s, _ := newStore(t)
	a := acquireNow(t, s, "seen", slotClaim("a", 2))
	drainChanges(a)
	if _, err := s.c.Delete(t.Context(), slotKey("seen", a.Slot())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Changes():
	case <-time.After(3 * time.Second): // a failure guard: nothing renews here
		t.Fatal("no Changes after the holder's slot key was deleted")
	}
	if _, err := a.Check(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Fatalf("check without the slot key: %v; want ErrLost", err)
	}
}

func drainChanges(l store.Lease) {
	for {
		select {
		case <-l.Changes():
		default:
			return
		}
	}
}
