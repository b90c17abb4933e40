package integration

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// TestEtcdKilledWaiterIsPruned: a waiter's leftover record is put as it
// queues (so that its take writes nothing, P7), naming the cgroup its
// command will run in, which is made only once the lease is held: a waiter
// has none. A waiter SIGKILLed while it waits leaves that record and no
// cgroup; once its lease expired, prune on its host deletes the record,
// and leaves the live holder alone.
func TestEtcdKilledWaiterIsPruned(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	cl := c.Client()
	dir := t.TempDir()
	h := onEtcd(t, eps, "run", "--key", "kw", "--", "sleep", "1000")
	startLogged(t, h, dir, "holder")
	waitContenders(t, cl, "kw", 1)
	w := onEtcd(t, eps, "run", "--key", "kw", "--ttl", "2", "--", "true")
	startLogged(t, w, dir, "waiter")
	waitContenders(t, cl, "kw", 2)

	// The waiter's record, queued, from the moment it queued.
	var rec struct {
		Cgroup string `json:"cgroup"`
		PID    int    `json:"pid"`
		Queued bool   `json:"queued"`
	}
	var recKey string
	resp, err := cl.Get(context.Background(), "_fencerun/leftovers/kw/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if json.Unmarshal(kv.Value, &rec) == nil && rec.PID == w.Process.Pid {
			recKey = string(kv.Key)
			break
		}
	}
	if recKey == "" || !rec.Queued {
		t.Fatalf("no queued leftover record of the waiter (pid %d) among %d records: %+v", w.Process.Pid, len(resp.Kvs), rec)
	}
	if rec.Cgroup != "" {
		if _, err := os.Stat(rec.Cgroup); !os.IsNotExist(err) {
			t.Errorf("the waiter's cgroup %s was made while it waits: %v", rec.Cgroup, err)
		}
	}
	t.Logf("the waiter's record %s names cgroup %q", recKey, rec.Cgroup)
	w.Process.Kill()
	exitOf(t, w)
	waitContenders(t, cl, "kw", 1) // the waiter's lease expired

	out, err := onEtcd(t, eps, "prune", "--json").Output()
	if err != nil || !strings.Contains(string(out), recKey) {
		t.Errorf("prune --json: %v; want the waiter's record %s deleted\n%s", err, recKey, out)
	}
	if resp, err := cl.Get(context.Background(), recKey); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the waiter's record after prune: %v, %d left", err, len(resp.Kvs))
	}
	if rec.Cgroup != "" {
		if _, err := os.Stat(rec.Cgroup); !os.IsNotExist(err) {
			t.Errorf("the waiter's cgroup %s is there after prune: %v", rec.Cgroup, err)
		}
	}
	if contenders(t, cl, "kw") != 1 {
		t.Error("prune touched the live holder")
	}
}
