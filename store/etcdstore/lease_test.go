package etcdstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store"
)

func acquireNow(t *testing.T, s *Store, key string, claim store.Claim) store.Lease {
	t.Helper()
	if claim.TTL == 0 {
		claim.TTL = 10 * time.Second
	}
	l, h, err := s.Acquire(t.Context(), key, claim)
	if err != nil || l == nil {
		t.Fatalf("acquire %s: %v (holder %+v)", key, err, h)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

// commandRecorded reads what the holder's records say of its command: the
// pid status shows, and the process group in its leftover record.
func commandRecorded(t *testing.T, s *Store, l store.Lease) (pid, group int) {
	t.Helper()
	st, err := s.Status(t.Context(), l.Key())
	if err != nil || st.Holder == nil {
		t.Fatalf("status %s: %v %+v", l.Key(), err, st)
	}
	resp, err := s.c.Get(t.Context(), leftoverKey(l.Key(), l.(*Lease).id))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leftover record of %s: %v, %d records", l.Key(), err, len(resp.Kvs))
	}
	var r leftover
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	return st.Holder.CommandPID, r.Group.ID
}

// setCommandLeftPending calls SetCommand on a lease with a cgroup, with
// no fallback write within the test, so that only a renewal can carry the
// record, and checks that SetCommand itself did not write it (P7).
func setCommandLeftPending(t *testing.T, s *Store, l store.Lease, pid int) {
	t.Helper()
	delay := commandDelay
	commandDelay = time.Hour
	err := l.SetCommand(t.Context(), store.ProcessID{ID: pid, Start: 7}, store.ProcessID{})
	commandDelay = delay
	if err != nil {
		t.Fatal(err)
	}
	if got, group := commandRecorded(t, s, l); got == pid || group == pid {
		t.Fatalf("SetCommand with a cgroup wrote its record at once (status pid %d, recorded group %d): P7", got, group)
	}
}

// SetCommand without a cgroup is written before it returns: a holder
// killed the moment after leaves its process group recorded.
func TestSetCommandWithoutCgroupIsWrittenAtOnce(t *testing.T) {
	s, _ := newStore(t)
	l := acquireNow(t, s, "nocg", store.Claim{Name: "t", Marker: "M=1"})
	if err := l.SetCommand(t.Context(), store.ProcessID{ID: 4242, Start: 7}, store.ProcessID{}); err != nil {
		t.Fatal(err)
	}
	if pid, group := commandRecorded(t, s, l); pid != 4242 || group != 4242 {
		t.Errorf("after SetCommand: status pid %d, recorded group %d; want 4242 both", pid, group)
	}
}

// With a cgroup (recorded at acquisition, which finds the tree exactly)
// SetCommand's record rides on the next write, here a renewal (P7: a short
// command costs no write for it), and is written by itself soon when no
// write comes.
func TestSetCommandWithCgroupRidesOnTheNextWrite(t *testing.T) {
	s, _ := newStore(t)
	claim := store.Claim{Name: "t", Marker: "M=1", Cgroup: "/sys/fs/cgroup/fencerun-test-1"}
	l := acquireNow(t, s, "cg", claim)
	if _, group := commandRecorded(t, s, l); group != 0 {
		t.Fatalf("before SetCommand the record names group %d", group)
	}
	setCommandLeftPending(t, s, l, 4242)
	if _, err := l.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pid, group := commandRecorded(t, s, l); pid != 4242 || group != 4242 {
		t.Errorf("after the renewal: status pid %d, recorded group %d; want 4242 both", pid, group)
	}

	l2 := acquireNow(t, s, "cg2", claim)
	if err := l2.SetCommand(t.Context(), store.ProcessID{ID: 4343, Start: 7}, store.ProcessID{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // a failure guard: the write comes within commandDelay
	for {
		pid, group := commandRecorded(t, s, l2)
		if pid == 4343 && group == 4343 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write carried SetCommand's record: status pid %d, recorded group %d", pid, group)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// At a TTL up to 3 s the first renewal, due within a second, carries
// SetCommand's record, and the fallback timer waits commandDelay past it
// (P4 on etcd: a write of its own was 0.8 ms of a hold); the renewal that
// carried it stops the timer. At a longer TTL the timer writes it within
// commandDelay, as above.
func TestSetCommandAtAShortTTLRidesOnTheFirstRenewal(t *testing.T) {
	s, _ := newStore(t)
	for _, c := range []struct {
		ttl, want time.Duration
	}{{2 * time.Second, 2*time.Second/3 + commandDelay}, {3 * time.Second, time.Second + commandDelay}, {4 * time.Second, commandDelay}, {30 * time.Second, commandDelay}} {
		if got := (&Lease{ttl: c.ttl}).recordDelay(); got != c.want {
			t.Errorf("TTL %v: record written after %v if nothing carries it; want %v", c.ttl, got, c.want)
		}
	}

	claim := store.Claim{Name: "t", Marker: "M=1", Cgroup: "/sys/fs/cgroup/fencerun-test-1", TTL: 3 * time.Second}
	l := acquireNow(t, s, "cg3", claim)
	setCommandLeftPending(t, s, l, 4444)
	if _, err := l.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pid, group := commandRecorded(t, s, l); pid != 4444 || group != 4444 {
		t.Errorf("after the first renewal: status pid %d, recorded group %d; want 4444 both", pid, group)
	}
	if l.(*Lease).cmdTimer.Stop() {
		t.Error("the renewal that carried the record left its fallback timer running")
	}
}

// A waiter whose predecessor in the queue leaves (a waiter that gave up)
// while the holder still holds does not take the lease: its take finds
// the holder older, and it waits for the holder, and takes the lease once
// the holder releases, with a higher fence.
func TestWaiterBehindALeavingWaiterWaitsForTheHolder(t *testing.T) {
	s, _ := newStore(t)
	takes := make(chan bool, 10)
	afterTake = func(key string, held bool) {
		if key == "q" {
			takes <- held
		}
	}
	t.Cleanup(func() { afterTake = nil })
	holder := acquireNow(t, s, "q", store.Claim{Name: "holder"})
	cl := s.c

	contenders := func() int64 {
		resp, err := cl.Get(t.Context(), "q/", withPrefixCount()...)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	waitContenders := func(n int64) {
		for deadline := time.Now().Add(30 * time.Second); contenders() != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("want %d contenders under q/, have %d", n, contenders())
			}
		}
	}
	leaving, leave := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		_, _, err := s.Acquire(leaving, "q", store.Claim{Name: "leaving", TTL: 10 * time.Second, Wait: true})
		left <- err
	}()
	waitContenders(2)
	type got struct {
		l   store.Lease
		err error
	}
	third := make(chan got, 1)
	go func() {
		l, _, err := s.Acquire(t.Context(), "q", store.Claim{Name: "third", TTL: 10 * time.Second, Wait: true})
		third <- got{l, err}
	}()
	waitContenders(3)
	leave()
	if err := <-left; err == nil {
		t.Fatal("the leaving waiter's Acquire returned no error")
	}
	if held := <-takes; held {
		t.Fatal("the third contender took the lease while the holder held it")
	}
	if _, err := holder.Check(t.Context()); err != nil {
		t.Fatalf("the holder lost its lease: %v", err)
	}
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if held := <-takes; !held {
		t.Fatal("the third contender's take after the holder released did not hold")
	}
	g := <-third
	if g.err != nil || g.l == nil {
		t.Fatalf("third: %v", g.err)
	}
	defer g.l.Release(context.Background())
	if g.l.Fence() <= holder.Fence() {
		t.Errorf("fence %d after the holder's %d", g.l.Fence(), holder.Fence())
	}
}

func withPrefixCount() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}
