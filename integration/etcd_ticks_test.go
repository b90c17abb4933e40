package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// TestEtcdRunLeavesNoTickDirectory: a run on etcd puts its tick socket in
// the user's private tick directory in $TMPDIR (etcd has no local state);
// the socket is removed when the run ends, whether the command ran, the key
// was busy or the cluster was unreachable: nothing is left but that one
// directory, empty.
func TestEtcdRunLeavesNoTickDirectory(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	for _, tc := range []struct {
		name, eps string
		args      []string
	}{
		{"ran", eps, []string{"run", "--key", "ticks", "--", "true"}},
		{"failed", eps, []string{"run", "--key", "ticks", "--", "sh", "-c", "exit 3"}},
		{"unreachable", "http://127.0.0.1:1", []string{"--dial-timeout", "300ms", "run", "--key", "ticks", "--", "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			h := onEtcd(t, tc.eps, tc.args...)
			h.Env = append(h.Env, "TMPDIR="+tmp)
			_ = h.Run()
			left, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range left {
				if e.Name() != ownTicks {
					t.Errorf("left in $TMPDIR: %s", e.Name())
					continue
				}
				in, _ := os.ReadDir(filepath.Join(tmp, e.Name()))
				for _, f := range in {
					t.Errorf("left in $TMPDIR/%s: %s", e.Name(), f.Name())
				}
			}
		})
	}
}

// ownTicks is the name of this user's tick directory in $TMPDIR.
var ownTicks = "fencerun-ticks-" + strconv.Itoa(os.Geteuid())

// TestKilledEtcdRunsDoNotPileUpTickDirectories: a wrapper killed by
// SIGKILL cannot remove what it made; each such run once left a
// $TMPDIR/fencerun-ticks-* directory of its own that only an etcd prune
// removed (686 after two chaos runs; issue 26). Now every run uses the
// user's one directory and removes the sockets of dead runs it finds
// there; the binding of a killed run's socket to its record (which the
// next holder needs to trust that record) goes once the next holder of
// its key has stopped its tree: after three killed runs of one key, one
// directory with the last one's socket and binding.
func TestKilledEtcdRunsDoNotPileUpTickDirectories(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	tmp := t.TempDir()
	for i := range 3 {
		h := onEtcd(t, c.Endpoints(), "run", "--key", "killed", "--ttl", "2s", "--",
			"sh", "-c", "kill -KILL $PPID; sleep 5")
		h.Env = append(h.Env, "TMPDIR="+tmp)
		if err := h.Run(); err == nil || h.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: %v, want the wrapper killed", i, err)
		}
	}
	left, _ := os.ReadDir(tmp)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != ownTicks {
		t.Fatalf("left in $TMPDIR after three killed runs: %v, want only %s", names, ownTicks)
	}
	in, _ := os.ReadDir(filepath.Join(tmp, ownTicks))
	socks := map[string]bool{}
	for _, e := range in {
		socks[strings.TrimSuffix(e.Name(), ".record")] = true
	}
	if len(socks) > 1 {
		t.Errorf("%d entries of %d runs left in %s, want at most the last killed run's socket and binding", len(in), len(socks), ownTicks)
	}
	// The next holder stops the last killed run's leftovers and removes
	// its cgroup, which nothing else would.
	next := onEtcd(t, c.Endpoints(), "run", "--key", "killed", "--", "true")
	next.Env = append(next.Env, "TMPDIR="+tmp)
	if out, err := next.CombinedOutput(); err != nil {
		t.Errorf("the next holder: %v\n%s", err, out)
	}
}
