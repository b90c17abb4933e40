package integration

import (
	"os"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// TestEtcdRunLeavesNoTickDirectory: a run on etcd makes a private tick
// directory in $TMPDIR (etcd has no local state); it is removed when the
// run ends, whether the command ran, the key was busy or the cluster was
// unreachable, not left behind one a run.
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
				t.Errorf("left in $TMPDIR: %s", e.Name())
			}
		})
	}
}
