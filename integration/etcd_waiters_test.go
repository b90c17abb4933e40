package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// heldOnEtcd starts a one-member cluster and a fencerun holding key on it
// whose command (holderScript) runs until dir/h.go appears.
func heldOnEtcd(t *testing.T, key string) (*etcdtest.Cluster, *clientv3.Client, string, *exec.Cmd) {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	dir := t.TempDir()
	h := onEtcd(t, c.Endpoints(), "run", "--key", key, "--ttl", "2", "--", "sh", "-c", holderScript, "sh", dir, "h")
	startLogged(t, h, dir, "holder")
	waitFile(t, filepath.Join(dir, "h.started"))
	return c, c.Client(), dir, h
}

// startLogged starts c in cg with its stderr in the file log, and returns
// log.
func (cg *testCgroup) startLogged(t *testing.T, c *exec.Cmd, log string) string {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c.Stderr = f
	cg.start(t, c)
	return log
}

// leftoverRecords reads the leftover records of key on the cluster, by
// their etcd key, as fencerun's etcd backend lays them out
// (_fencerun/leftovers/KEY/LEASE: store/etcdstore/doc.go).
func leftoverRecords(t *testing.T, cl *clientv3.Client, key string) map[string]map[string]any {
	t.Helper()
	resp, err := cl.Get(context.Background(), "_fencerun/leftovers/"+key+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, kv := range resp.Kvs {
		var r map[string]any
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatalf("leftover record %s: %v: %q", kv.Key, err, kv.Value)
		}
		out[string(kv.Key)] = r
	}
	return out
}

// A waiter SIGKILLed while it waits leaves the leftover record it put as
// it queued (e92fd18), and no cgroup (one is made only once the lease is
// held). The record may not stall or mislead the next holder on this
// host: it takes the key once the dead waiter's lease is gone, runs its
// command (the dead waiter's never runs), and afterwards the key has no
// leftovers, the dead waiter's record is gone from etcd and no cgroup is
// left.
func TestEtcdWaiterKilledWhileQueued(t *testing.T) {
	t.Parallel()
	c, cl, dir, h := heldOnEtcd(t, "kq")
	eps := c.Endpoints()
	cg := newTestCgroup(t)

	w := onEtcd(t, eps, "run", "--key", "kq", "--ttl", "2", "--name", "waiter", "--", "touch", filepath.Join(dir, "w-ran"))
	cg.startLogged(t, w, filepath.Join(dir, "waiter.log"))
	waitContenders(t, cl, "kq", 2)
	cg.noCgroupWhileWaiting(t)
	recs := leftoverRecords(t, cl, "kq")
	queued := 0
	for k, r := range recs {
		if r["queued"] == true {
			queued++
			if pid, _ := r["pid"].(float64); int(pid) != w.Process.Pid {
				t.Errorf("queued record %s names pid %v, want the waiter's %d", k, r["pid"], w.Process.Pid)
			}
		}
	}
	if queued != 1 {
		t.Logf("leftover records while the waiter waits: %v (want one queued: the test then shows less)", recs)
	}

	w.Process.Kill()
	exitOf(t, w)

	n := onEtcd(t, eps, "run", "--key", "kq", "--ttl", "2", "--name", "next", "--", "sh", "-c", holderScript, "sh", dir, "n")
	nlog := startLogged(t, n, dir, "next")
	// The next waiter queues behind the holder; the dead waiter between
	// them loses its place at once (D71), so wait for the next one's
	// place, not for a count of contenders.
	if err := waitFor(func() bool {
		out, _ := onEtcd(t, eps, "status", "kq", "--json").Output()
		return strings.Contains(string(out), `"name": "next"`) || strings.Contains(string(out), `"name":"next"`)
	}); err != nil {
		t.Fatal("the next waiter never queued")
	}
	if err := os.WriteFile(filepath.Join(dir, "h.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, h); code != 0 {
		t.Errorf("holder exited %d", code)
	}
	waitFile(t, filepath.Join(dir, "n.started"))
	if err := os.WriteFile(filepath.Join(dir, "n.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, n); code != 0 {
		b, _ := os.ReadFile(nlog)
		t.Errorf("next holder exited %d\n%s", code, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "w-ran")); err == nil {
		t.Error("the killed waiter's command ran")
	}
	if order, _ := os.ReadFile(filepath.Join(dir, "order")); strings.Contains(string(order), "overlap") {
		t.Errorf("two commands overlapped:\n%s", order)
	}
	if recs := leftoverRecords(t, cl, "kq"); len(recs) != 0 {
		t.Errorf("leftover records after the next holder ran on the dead waiter's host: %v", recs)
	}
	if left := cg.fencerunCgroups(t); len(left) != 0 {
		t.Errorf("the killed waiter's cgroup is still there after the next holder on its host ran: %v", left)
	}
	st := onEtcd(t, eps, "status", "kq", "--json")
	out, err := st.Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if strings.Contains(string(out), "leftovers") {
		t.Errorf("status shows leftovers of the dead waiter: %s", out)
	}
}

// A waiter that took the lease and started its command, SIGKILLed before
// its command was written down (its leftover record is still the one it
// put as it queued: SetCommand leaves a cgroup's record to the next write,
// e92fd18), leaves a process that left its group and session in its
// command's cgroup. The next holder on this host stops it before its own
// command starts (S2, E5).
func TestEtcdWaiterKilledRightAfterItsTake(t *testing.T) {
	t.Parallel()
	c, cl, dir, h := heldOnEtcd(t, "kt")
	eps := c.Endpoints()
	cg := newTestCgroup(t)

	leftover := filepath.Join(dir, "leftover")
	w := onEtcd(t, eps, "run", "--key", "kt", "--ttl", "2", "--name", "waiter", "--", "sh", "-c",
		"setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > "+leftover+".tmp; mv "+leftover+".tmp "+leftover+"; exec sleep 1000")
	cg.startLogged(t, w, filepath.Join(dir, "waiter.log"))
	waitContenders(t, cl, "kt", 2)
	n := onEtcd(t, eps, "run", "--key", "kt", "--ttl", "2", "--name", "next", "--", "touch", filepath.Join(dir, "next-started"))
	nlog := startLogged(t, n, dir, "next")
	waitContenders(t, cl, "kt", 3)

	if err := os.WriteFile(filepath.Join(dir, "h.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFile(t, leftover)
	w.Process.Kill()
	recs := leftoverRecords(t, cl, "kt")
	exitOf(t, w)
	stillQueued := false
	for _, r := range recs {
		if pid, _ := r["pid"].(float64); int(pid) == w.Process.Pid && r["queued"] == true {
			stillQueued = true
		}
	}
	t.Logf("the killed waiter's record was still queued: %v (%v)", stillQueued, recs)
	left := readPids(leftover)[0]
	if !alive(left) {
		t.Fatal("the leftover died with the wrapper: the test shows nothing")
	}
	if code := exitOf(t, h); code != 0 {
		t.Errorf("holder exited %d", code)
	}
	waitFile(t, filepath.Join(dir, "next-started"))
	if alive(left) {
		b, _ := os.ReadFile(nlog)
		t.Errorf("the next holder started beside the dead waiter's leftover pid %d\n%s", left, b)
	}
	if code := exitOf(t, n); code != 0 {
		t.Errorf("next holder exited %d", code)
	}
	if left := cg.fencerunCgroups(t); len(left) != 0 {
		t.Errorf("the dead waiter's command cgroup is still there: %v", left)
	}
	_ = syscall.Kill(left, syscall.SIGKILL)
}

// A waiter on etcd whose wait ends without the lease (-w ran out, -n found
// the key busy, SIGTERM, SIGHUP) leaves nothing: neither the leftover
// record it put as it queued (e92fd18) nor a cgroup (it makes none while
// it waits), and its command never runs.
func TestEtcdWaitThatEndsLeavesNothing(t *testing.T) {
	t.Parallel()
	c, cl, dir, h := heldOnEtcd(t, "kw")
	eps := c.Endpoints()
	holderRecords := len(leftoverRecords(t, cl, "kw"))

	for _, end := range []string{"wait", "nowait", "sigterm", "sighup"} {
		t.Run(end, func(t *testing.T) {
			cg := newTestCgroup(t)
			args := []string{"run", "--key", "kw", "--ttl", "2", "--name", "waiter-" + end}
			want := 75
			switch end {
			case "wait":
				args = append(args, "-w", "0.5s")
			case "nowait":
				args = append(args, "-n")
			case "sigterm":
				want = 128 + int(syscall.SIGTERM)
			case "sighup":
				want = 128 + int(syscall.SIGHUP)
			}
			ran := filepath.Join(dir, end+"-ran")
			w := onEtcd(t, eps, append(args, "--", "touch", ran)...)
			wlog := cg.startLogged(t, w, filepath.Join(dir, end+".log"))
			if strings.HasPrefix(end, "sig") {
				waitContenders(t, cl, "kw", 2)
				cg.noCgroupWhileWaiting(t)
				sig := map[string]syscall.Signal{"sigterm": syscall.SIGTERM, "sighup": syscall.SIGHUP}[end]
				if err := w.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			}
			if code := exitOf(t, w); code != want {
				b, _ := os.ReadFile(wlog)
				t.Errorf("waiter exit %d, want %d\n%s", code, want, b)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("the waiter's command ran")
			}
			if left := cg.fencerunCgroups(t); len(left) != 0 {
				t.Errorf("the waiter left its command's cgroup: %v", left)
			}
			if recs := leftoverRecords(t, cl, "kw"); len(recs) != holderRecords {
				t.Errorf("leftover records after the wait ended: %v, want only the holder's", recs)
			}
			if n := contenders(t, cl, "kw"); n != 1 {
				t.Errorf("%d contenders after the wait ended, want the holder alone", n)
			}
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "h.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, h); code != 0 {
		t.Errorf("holder exited %d", code)
	}
}

// Two waiters queue behind a holder on this host. When the first takes
// the key, the second's record (put as it queued, naming the cgroup it
// will make once it holds) is a live contender's, not a leftover: the
// first stops nothing of it, its record stays, and the second then runs
// its command in a cgroup it made then.
func TestEtcdSecondWaiterIsNoLeftoverOfTheFirst(t *testing.T) {
	t.Parallel()
	c, cl, dir, h := heldOnEtcd(t, "k2")
	eps := c.Endpoints()
	cg1, cg2 := newTestCgroup(t), newTestCgroup(t)
	start := func(cg *testCgroup, name string) *exec.Cmd {
		w := onEtcd(t, eps, "run", "--key", "k2", "--ttl", "2", "--name", name, "--", "sh", "-c",
			`cat /proc/self/cgroup > "$1/$2.cgroup"; `+holderScript, "sh", dir, name)
		cg.startLogged(t, w, filepath.Join(dir, name+".log"))
		return w
	}
	w1 := start(cg1, "w1")
	waitContenders(t, cl, "k2", 2)
	w2 := start(cg2, "w2")
	waitContenders(t, cl, "k2", 3)
	cg2.noCgroupWhileWaiting(t)
	var w2Record string
	for k, r := range leftoverRecords(t, cl, "k2") {
		if pid, _ := r["pid"].(float64); int(pid) == w2.Process.Pid {
			w2Record = k
		}
	}
	if w2Record == "" {
		t.Fatal("the second waiter put no leftover record as it queued")
	}

	if err := os.WriteFile(filepath.Join(dir, "h.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "w1.started"))
	if _, ok := leftoverRecords(t, cl, "k2")[w2Record]; !ok {
		t.Error("the first waiter's take deleted the second waiter's record as a leftover")
	}
	cg2.noCgroupWhileWaiting(t)
	if b, _ := os.ReadFile(filepath.Join(dir, "w1.log")); strings.Contains(string(b), "stopping its leftovers") {
		t.Errorf("the first waiter stopped leftovers after a clean handoff:\n%s", b)
	}
	if err := os.WriteFile(filepath.Join(dir, "w1.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "w2.started"))
	made := cg2.fencerunCgroups(t)
	if len(made) != 1 {
		t.Fatalf("the second waiter, holding, made cgroups %v, want one", made)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "w2.cgroup")); !strings.Contains(string(b), "/"+made[0]+"\n") {
		t.Errorf("the second waiter's command ran in %q, want the cgroup %s it made", b, made[0])
	}
	if err := os.WriteFile(filepath.Join(dir, "w2.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{h, w1, w2} {
		if code := exitOf(t, c); code != 0 {
			t.Errorf("%v exited %d", c.Args, code)
		}
	}
	if order, _ := os.ReadFile(filepath.Join(dir, "order")); strings.Contains(string(order), "overlap") {
		t.Errorf("two commands overlapped:\n%s", order)
	}
}

// A waiter on etcd whose cluster goes away while it waits (every member
// killed) fails as a run on a bad cluster does (E6): exit 125 naming the
// endpoint and the cause, without waiting out its -w (a minute here: the
// watch alone would wait for the cluster's return, silently, as its
// client retries). It leaves no cgroup (it makes none while it waits),
// and never runs its command. What it put on etcd cannot be
// deleted then: its lease expires, and its queued record names a tree
// that never ran (prune deletes it).
func TestEtcdWaitEndedByAStoreErrorLeavesNoCgroup(t *testing.T) {
	t.Parallel()
	c, cl, dir, h := heldOnEtcd(t, "ke")
	eps := c.Endpoints()
	cg := newTestCgroup(t)
	ran := filepath.Join(dir, "w-ran")
	w := onEtcd(t, eps, "run", "--key", "ke", "--ttl", "2", "--name", "waiter", "--dial-timeout", "1s", "-w", "1m", "--", "touch", ran)
	wlog := cg.startLogged(t, w, filepath.Join(dir, "waiter.log"))
	waitContenders(t, cl, "ke", 2)
	cg.noCgroupWhileWaiting(t)
	for _, m := range c.Members {
		m.Kill()
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(wlog)
			t.Logf("waiter's log:\n%s", b)
		}
	})
	code := exitOf(t, w)
	b, _ := os.ReadFile(wlog)
	if code != 125 || !strings.Contains(string(b), eps) || !strings.Contains(string(b), "connection refused") {
		t.Errorf("the waiter exited %d with its cluster gone, want 125 naming %s and the cause (connection refused)", code, eps)
	}
	if i := strings.LastIndex(strings.TrimSpace(string(b)), "\n"); i >= 0 {
		t.Logf("the waiter's last line: %s", strings.TrimSpace(string(b))[i+1:])
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the waiter's command ran")
	}
	if left := cg.fencerunCgroups(t); len(left) != 0 {
		t.Errorf("the waiter left its command's cgroup: %v\n%s", left, b)
	}
	exitOf(t, h)
}
