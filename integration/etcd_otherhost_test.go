package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// forged is a cluster on which a test puts leftover records by hand, as
// other hosts (which this one has not) and dead holders would leave them.
type forged struct {
	t    *testing.T
	c    *etcdtest.Cluster
	cl   *clientv3.Client
	host string // this host's name
	dead int    // a pid that is gone
}

func newForged(t *testing.T) *forged {
	c := etcdtest.Start(t, etcdtest.Options{})
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	return &forged{t: t, c: c, cl: c.Client(), host: host, dead: dead.Process.Pid}
}

func (f *forged) put(key string, r map[string]any) {
	f.t.Helper()
	b, _ := json.Marshal(r)
	if _, err := f.cl.Put(context.Background(), key, string(b)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *forged) count(key string) int64 {
	f.t.Helper()
	resp, err := f.cl.Get(context.Background(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.Count
}

// run runs a command under key at the default log level, and returns its
// log.
func (f *forged) run(key string) string {
	f.t.Helper()
	r := onEtcd(f.t, f.c.Endpoints(), "run", "--key", key, "--", "true")
	r.Env = slices.DeleteFunc(r.Env, func(kv string) bool { return strings.HasPrefix(kv, "FENCERUN_LOG_LEVEL=") })
	log := startLogged(f.t, r, f.t.TempDir(), "run")
	err := r.Wait()
	out, _ := os.ReadFile(log)
	if err != nil {
		f.t.Fatalf("run: %v\n%s", err, out)
	}
	return string(out)
}

// A queued leftover record of another host (its waiter killed in its
// queue there: forged here, as this host has no other) neither makes a
// run here say, at the default log level, that a dead holder's leftovers
// run on another host, nor keeps this host's dead holder's record from
// being deleted once its tree is known gone; the other host's stays, and
// gives the key no row in list.
func TestEtcdOtherHostsQueuedRecordIsQuiet(t *testing.T) {
	f := newForged(t)
	const elsewhere, here = "_fencerun/leftovers/oq/7001", "_fencerun/leftovers/oq/7002"
	f.put(elsewhere, map[string]any{"marker": "M=elsewhere", "host": "cgclean-other-host.invalid", "name": "w", "pid": f.dead, "fence": 9, "queued": true})
	f.put(here, map[string]any{"marker": "M=here", "host": f.host, "name": "h", "pid": f.dead, "fence": 5})

	out := f.run("oq")
	if strings.Contains(out, "another host") {
		t.Errorf("the run reported another host's queued record as a dead holder's leftovers:\n%s", out)
	}
	if f.count(here) != 0 {
		t.Errorf("this host's dead holder's record %s is still there after the run stopped its tree:\n%s", here, out)
	}
	if f.count(elsewhere) != 1 {
		t.Errorf("another host's queued record %s was deleted here", filepath.Base(elsewhere))
	}
	// Left alone, it makes the key no row of list, as status says free
	// (once the run's own holding is out of the key's history, which
	// would list it as a key once used).
	if _, err := f.cl.Delete(context.Background(), "_fencerun/history/oq#", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list", "--json"}, {"status", "oq", "--json"}} {
		b, err := onEtcd(t, f.c.Endpoints(), args...).Output()
		if err != nil || args[0] == "list" && strings.Contains(string(b), `"oq"`) || args[0] == "status" && !strings.Contains(string(b), `"state": "free"`) {
			t.Errorf("%v: %v, want no row for oq in list and free in status:\n%s", args, err, b)
		}
	}
}

// A confirmed dead holder's record of another host (its tree may run
// there: forged here) is that host's to stop, and does not block this
// one: a run here stops this host's dead holder's tree, deletes this
// host's record and runs its command, and leaves the other host's record
// for a fencerun there, saying so once, naming that holder and host;
// status and list here report none of the other host's trees (nor its
// queued records) as leftovers. Before, the run kept this host's record
// too (fenced skipped LeftoversStopped while any tree was elsewhere), and
// every later run here looked for its tree again.
func TestEtcdOtherHostsDeadHolderIsLeftToThatHost(t *testing.T) {
	f := newForged(t)
	const other = "tidy2-other-host.invalid"
	const confirmed, queued, here = "_fencerun/leftovers/oh/7001", "_fencerun/leftovers/oh/7003", "_fencerun/leftovers/oh/7002"
	f.put(confirmed, map[string]any{"marker": "M=elsewhere", "host": other, "name": "e", "pid": 4242, "fence": 9})
	f.put(queued, map[string]any{"marker": "M=queued", "host": other, "name": "q", "pid": 4243, "fence": 11, "queued": true})
	f.put(here, map[string]any{"marker": "M=here", "host": f.host, "name": "h", "pid": f.dead, "fence": 5})

	out := f.run("oh")
	t.Logf("run:\n%s", out)
	if f.count(here) != 0 {
		t.Errorf("this host's dead holder's record %s is still there after the run stopped its tree", here)
	}
	if f.count(confirmed) != 1 || f.count(queued) != 1 {
		t.Errorf("another host's records were deleted here: confirmed %d, queued %d", f.count(confirmed), f.count(queued))
	}
	if n := strings.Count(out, other+" (1 record)"); n != 1 || strings.Contains(out, "4243") {
		t.Errorf("the run named the other host's dead holder %d times, want once, and never its queued record", n)
	}
	for _, args := range [][]string{{"status", "oh"}, {"status", "oh", "--json"}, {"list"}} {
		b, err := onEtcd(t, f.c.Endpoints(), args...).Output()
		t.Logf("%v: %v\n%s", args, err, b)
		if err != nil || strings.Contains(string(b), "leftovers") {
			t.Errorf("%v: %v, want no leftovers reported here", args, err)
		}
	}
}

// E11: the records of a host gone for good are named once per takeover,
// as that host with how many records it has, not one entry each, a list
// that grew with every dead holder there; prune --forget-host HOST drops
// them, but for those of HOST's live contenders, and refuses this host
// (prune stops its leftovers) and the file backend (no other host's
// records). Before, there was no way to drop them: every takeover named
// them all, forever.
func TestEtcdForgetHostDropsAGoneHostsRecords(t *testing.T) {
	f := newForged(t)
	const gone = "e11-gone-host.invalid"
	recs := []string{"_fencerun/leftovers/fh/7001", "_fencerun/leftovers/fh/7002", "_fencerun/leftovers/fh/7003"}
	for i, k := range recs {
		f.put(k, map[string]any{"marker": "M=gone", "host": gone, "name": "g", "pid": 5000 + i, "fence": 9 + i})
	}
	out := f.run("fh")
	if n := strings.Count(out, gone); n != 1 || !strings.Contains(out, gone+" (3 records)") {
		t.Errorf("the takeover named %s %d times, want once with its 3 records:\n%s", gone, n, out)
	}
	// A live contender of the gone host's name: its record stays.
	g, err := f.cl.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	live := fmt.Sprintf("fh/%x", int64(g.ID))
	if _, err := f.cl.Put(context.Background(), live, "", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	f.put("_fencerun/leftovers/"+live, map[string]any{"marker": "M=live", "host": gone, "name": "l", "pid": 6000})

	b, err := onEtcd(t, f.c.Endpoints(), "prune", "--forget-host", gone, "--json").Output()
	if err != nil {
		t.Fatalf("prune --forget-host: %v\n%s", err, b)
	}
	for _, k := range recs {
		if f.count(k) != 0 || !strings.Contains(string(b), k) {
			t.Errorf("%s: still there after prune --forget-host, or not reported:\n%s", k, b)
		}
	}
	if f.count("_fencerun/leftovers/"+live) != 1 {
		t.Error("prune --forget-host dropped a live contender's record")
	}
	if _, err := f.cl.Revoke(context.Background(), g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cl.Delete(context.Background(), "_fencerun/leftovers/"+live); err != nil {
		t.Fatal(err)
	}
	if out := f.run("fh"); strings.Contains(out, gone) {
		t.Errorf("a takeover after --forget-host still names %s:\n%s", gone, out)
	}
	me, _ := os.Hostname()
	for _, args := range [][]string{{"prune", "--forget-host", me}} {
		if code := testsupport.ExitCode(t, onEtcd(t, f.c.Endpoints(), args...).Run()); code != 125 {
			t.Errorf("%v: exit %d, want 125", args, code)
		}
	}
	if code := testsupport.ExitCode(t, fencerun(t.TempDir(), "prune", "--forget-host", gone).Run()); code != 125 {
		t.Errorf("prune --forget-host on the file backend: exit %d, want 125", code)
	}
}
