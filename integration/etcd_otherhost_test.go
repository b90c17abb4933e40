package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// A queued leftover record of another host (its waiter killed in its
// queue there: forged here, as this host has no other) neither makes a
// run here say, at the default log level, that a dead holder's leftovers
// run on another host, nor keeps this host's dead holder's record from
// being deleted once its tree is known gone; the other host's stays.
func TestEtcdOtherHostsQueuedRecordIsQuiet(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cl := c.Client()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	put := func(key string, r map[string]any) {
		t.Helper()
		b, _ := json.Marshal(r)
		if _, err := cl.Put(context.Background(), key, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	const elsewhere, here = "_fencerun/leftovers/oq/7001", "_fencerun/leftovers/oq/7002"
	put(elsewhere, map[string]any{"marker": "M=elsewhere", "host": "cgclean-other-host.invalid", "name": "w", "pid": dead.Process.Pid, "fence": 9, "queued": true})
	put(here, map[string]any{"marker": "M=here", "host": host, "name": "h", "pid": dead.Process.Pid, "fence": 5})

	r := onEtcd(t, c.Endpoints(), "run", "--key", "oq", "--", "true")
	r.Env = slices.DeleteFunc(r.Env, func(kv string) bool { return strings.HasPrefix(kv, "FENCERUN_LOG_LEVEL=") }) // the default level
	log := startLogged(t, r, t.TempDir(), "run")
	if err := r.Wait(); err != nil {
		out, _ := os.ReadFile(log)
		t.Fatalf("run: %v\n%s", err, out)
	}
	out, _ := os.ReadFile(log)
	if strings.Contains(string(out), "another host") {
		t.Errorf("the run reported another host's queued record as a dead holder's leftovers:\n%s", out)
	}
	count := func(key string) int64 {
		resp, err := cl.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	if count(here) != 0 {
		t.Errorf("this host's dead holder's record %s is still there after the run stopped its tree:\n%s", here, out)
	}
	if count(elsewhere) != 1 {
		t.Errorf("another host's queued record %s was deleted here", filepath.Base(elsewhere))
	}
}
