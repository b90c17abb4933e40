package etcdstore

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/ticksock"
	"github.com/fencerun/fencerun/store"
)

// record reads a contender's leftover record as etcd has it.
func record(t *testing.T, s *Store, key string, id clientv3.LeaseID) (leftover, int64, int64, bool) {
	t.Helper()
	resp, err := s.c.Get(t.Context(), leftoverKey(key, id))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return leftover{}, 0, 0, false
	}
	var r leftover
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	return r, resp.Kvs[0].CreateRevision, resp.Kvs[0].ModRevision, true
}

// A waiter's leftover record is put as it queues, marked queued, so that
// its take writes nothing (P7); it is no leftover while its contender
// lives, and its holder's first record of its command confirms it.
func TestWaiterRecordIsPutAsItQueues(t *testing.T) {
	s, _ := newStore(t)
	holder := acquireNow(t, s, "q", store.Claim{Name: "holder", Marker: "M=holder"})
	type result struct {
		l   store.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, _, err := s.Acquire(t.Context(), "q", store.Claim{Name: "waiter", Marker: "M=waiter", TTL: 10 * time.Second, Wait: true})
		got <- result{l, err}
	}()
	// Queued: its key is under the prefix (a watch from the start, no
	// sleeps).
	var waiterID clientv3.LeaseID
	for wr := range s.c.Watch(t.Context(), prefixOf("q"), clientv3.WithPrefix(), clientv3.WithRev(1)) {
		for _, ev := range wr.Events {
			if ev.Kv.Lease != int64(holder.(*Lease).id) {
				waiterID = clientv3.LeaseID(ev.Kv.Lease)
			}
		}
		if waiterID != 0 {
			break
		}
	}
	r, created, _, ok := record(t, s, "q", waiterID)
	if !ok || !r.Queued || r.Marker != "M=waiter" || r.PID != os.Getpid() {
		t.Fatalf("waiter's record %+v (found %v): want it put queued, with its marker and pid", r, ok)
	}
	st, err := s.Status(t.Context(), "q")
	if err != nil || len(st.Leftovers) != 0 || len(st.Waiters) != 1 {
		t.Fatalf("status with a live waiter: %v %+v; want one waiter and no leftovers", err, st)
	}
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil || res.l == nil {
		t.Fatalf("waiter's acquire: %v", res.err)
	}
	w := res.l
	t.Cleanup(func() { w.Release(t.Context()) })
	if p := w.Predecessor(); p != nil {
		t.Errorf("predecessor %+v after a clean release: its own record counted", p)
	}
	r, _, mod, ok := record(t, s, "q", waiterID)
	if !ok || mod != created || uint64(created) != w.Fence() {
		t.Errorf("after the take the record was written (create %d, mod %d, fence %d, found %v): the take must not write", created, mod, w.Fence(), ok)
	}
	if err := w.SetCommand(t.Context(), store.ProcessID{ID: 4242, Start: 1}, store.ProcessID{}); err != nil {
		t.Fatal(err)
	}
	if r, _, _, _ = record(t, s, "q", waiterID); r.Queued || r.Group.ID != 4242 {
		t.Errorf("after SetCommand the record is %+v: want it confirmed, with the group", r)
	}
}

// A queued record left by a dead contender (a waiter killed while it
// waited, or a holder killed before its command's record) is a leftover
// all the same: its tree is stopped by the next holder, which names it
// its Predecessor only when no confirmed holder left one. prune deletes
// it once nothing of its tree runs, and not before.
func TestQueuedRecordOfTheDead(t *testing.T) {
	s, _ := newStore(t)
	s.running = carriersOf
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid
	put := func(key string, id clientv3.LeaseID, r leftover) {
		t.Helper()
		r.Host, r.PID, r.Name = s.host, deadPID, "dead"
		data, _ := json.Marshal(r)
		if _, err := s.c.Put(t.Context(), leftoverKey(key, id), string(data)); err != nil {
			t.Fatal(err)
		}
	}
	// Only a queued record: it is the Predecessor.
	put("dq", 0x100, leftover{Marker: "M=dq", Queued: true})
	l := acquireNow(t, s, "dq", store.Claim{Name: "t"})
	if p := l.Predecessor(); p == nil || p.Marker != "M=dq" || len(p.Leftovers) != 1 {
		t.Errorf("predecessor %+v: want the queued record's", p)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A confirmed holder's record beside a newer queued one: the holder is
	// the Predecessor, both are trees.
	put("dc", 0x200, leftover{Marker: "M=holder", Fence: 5})
	put("dc", 0x201, leftover{Marker: "M=waiter", Fence: 9, Queued: true})
	l = acquireNow(t, s, "dc", store.Claim{Name: "t"})
	if p := l.Predecessor(); p == nil || p.Marker != "M=holder" || len(p.Leftovers) != 2 {
		t.Errorf("predecessor %+v: want the confirmed holder's, with both trees", p)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// prune: a queued record whose marker a live process carries stays;
	// one whose tree is gone goes; a confirmed one stays (the next holder
	// confirms it stopped).
	// Its marker is bound to its record (bindTick), as a run's is.
	ticks := filepath.Join(t.TempDir(), ticksPattern+strconv.Itoa(os.Geteuid()))
	if err := os.Mkdir(ticks, 0o700); err != nil {
		t.Fatal(err)
	}
	marker := ticksock.Marker(filepath.Join(ticks, "t-0123456789abcdef0123456789abcdef"))
	s.bindTick(marker, leftoverKey("pl", 0x300), 1)
	sleeper := exec.Command("sleep", "60")
	sleeper.Env = append(os.Environ(), marker)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	put("pl", 0x300, leftover{Marker: marker, Queued: true})
	put("pg", 0x301, leftover{Marker: "M=gone", Queued: true})
	pruned, err := s.Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range pruned {
		paths = append(paths, p.Path)
	}
	if !slices.Contains(paths, leftoverKey("pg", 0x301)) || !slices.Contains(paths, leftoverKey("dc", 0x201)) {
		t.Errorf("pruned %v: want the queued records whose trees are gone (pg's, dc's)", paths)
	}
	if _, _, _, ok := record(t, s, "pl", 0x300); !ok {
		t.Error("prune deleted a queued record whose tree runs")
	}
	if _, _, _, ok := record(t, s, "dc", 0x200); !ok {
		t.Error("prune deleted a confirmed holder's record")
	}
}

// A waiter keeps its lease alive on a stream of its own while it waits
// past its TTL, and takes the lease without a keep-alive of its own: the
// holder's term starts at the send time of the waiter's last keep-alive
// (E2), not at the grant's.
func TestWaiterTermIsItsLastKeepAlive(t *testing.T) {
	s, _ := newStore(t)
	holder := acquireNow(t, s, "kt", store.Claim{Name: "holder"})
	var (
		mu    sync.Mutex
		reads []time.Duration
	)
	clock := func() time.Duration {
		now := boottime.Now()
		mu.Lock()
		reads = append(reads, now)
		mu.Unlock()
		return now
	}
	got := make(chan store.Lease, 1)
	go func() {
		l, _, err := s.Acquire(t.Context(), "kt", store.Claim{Name: "waiter", TTL: MinTTL, Wait: true, Clock: clock})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// Past the waiter's TTL: without its keep-alives its lease expires,
	// its key goes and the take fails.
	time.Sleep(MinTTL + time.Second)
	released := boottime.Now()
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.Fatal("the waiter did not hold after waiting past its TTL")
	}
	t.Cleanup(func() { w.Release(t.Context()) })
	mu.Lock()
	defer mu.Unlock()
	start := w.Term().Start
	if len(reads) < 2 || start == reads[0] || !slices.Contains(reads, start) || start > released {
		t.Errorf("holder's term starts at %v; want the send time of a keep-alive the waiter sent while it waited: after the grant's (%v), before the release (%v), of %v", start, reads[0], released, reads)
	}
}

// A queued record of another host (a waiter there killed in its queue, or
// killed between its take and its first record as a holder: the records
// cannot tell which) is no tree of this host's Predecessor: it would make
// every run here report a dead holder's leftovers on another host, and
// keep this host's stopped records from being deleted. It stays in etcd
// for a fencerun on its own host. A confirmed holder's record of another
// host is still a tree to report.
func TestQueuedRecordOfAnotherHost(t *testing.T) {
	s, _ := newStore(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	const other = "cgclean-other-host.invalid"
	put := func(key string, id clientv3.LeaseID, r leftover) {
		t.Helper()
		r.PID, r.Name = dead.Process.Pid, "dead"
		data, _ := json.Marshal(r)
		if _, err := s.c.Put(t.Context(), leftoverKey(key, id), string(data)); err != nil {
			t.Fatal(err)
		}
	}
	put("oh", 0x500, leftover{Host: other, Marker: "M=elsewhere", Fence: 7, Queued: true})
	put("oh", 0x501, leftover{Host: s.host, Marker: "M=here", Fence: 5})
	l := acquireNow(t, s, "oh", store.Claim{Name: "t"})
	p := l.Predecessor()
	if p == nil || p.Marker != "M=here" || len(p.Leftovers) != 1 || p.Leftovers[0].Host != s.host {
		t.Fatalf("predecessor %+v: want this host's dead holder, with its tree only", p)
	}
	if err := l.LeftoversStopped(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil { // waits for the deletion
		t.Fatal(err)
	}
	if _, _, _, ok := record(t, s, "oh", 0x501); ok {
		t.Error("this host's stopped record was not deleted")
	}
	if _, _, _, ok := record(t, s, "oh", 0x500); !ok {
		t.Error("another host's queued record was deleted here")
	}

	// Only another host's queued record: no leftovers in status, no
	// predecessor at all, and no row in list (status says free, as of a
	// key never used, and list has no row for one of those either).
	if st, err := s.Status(t.Context(), "oh"); err != nil || len(st.Leftovers) != 0 {
		t.Errorf("status with another host's queued record alone: %+v, %v; want no leftovers", st, err)
	}
	// The key's history (one holding, above) would list it, as a key once
	// used: without it, it is as a key never used.
	if _, err := s.ForgetHistory(t.Context(), "oh"); err != nil {
		t.Fatal(err)
	}
	all, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range all {
		if st.Key == "oh" {
			t.Errorf("list has a row for a key with another host's queued record alone: %+v; want none", st)
		}
	}
	l = acquireNow(t, s, "oh", store.Claim{Name: "t"})
	if p := l.Predecessor(); p != nil {
		t.Errorf("predecessor %+v from another host's queued record alone: want none", p)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Another host's confirmed holder is still reported, as before.
	put("oc", 0x600, leftover{Host: other, Marker: "M=holder-elsewhere", Fence: 3})
	l = acquireNow(t, s, "oc", store.Claim{Name: "t"})
	if p := l.Predecessor(); p == nil || len(p.Leftovers) != 1 || p.Leftovers[0].Host != other {
		t.Errorf("predecessor %+v: want another host's confirmed holder, with its tree", p)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// carriersOf counts the processes that carry a tree's marker, as the
// caller's supervisor.CountTrees does for trees without a cgroup or group
// (Options.Running).
func carriersOf(trees []store.Leftover) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		for _, tr := range trees {
			if carries(pid, tr.Marker) {
				n++
			}
		}
	}
	return n, nil
}
