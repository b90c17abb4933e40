package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// E9: the command can check its fence with etcdctl as it is: fencerun
// gives it ETCDCTL_ENDPOINTS (the endpoints it used, replacing one the
// command would inherit) and the TLS files it was given, never a
// password, so the fencing transaction (the holder key's create revision
// compared with FENCERUN_FENCE) reaches the cluster. Before, etcdctl in
// the command dialled its default 127.0.0.1:2379, or whatever the
// inherited ETCDCTL_ENDPOINTS named.
func TestEtcdCommandGetsTheClusterForItsFence(t *testing.T) {
	needEtcdctl(t)
	c := etcdtest.Start(t, etcdtest.Options{})
	dir := t.TempDir()
	script := `env | grep -E '^ETCDCTL_' > "$1/env"
etcdctl txn > "$1/txn" <<EOF
create("$ETCD_LOCK_KEY") = "$FENCERUN_FENCE"

put fenced-resource "written under fence $FENCERUN_FENCE"


EOF`
	r := onEtcd(t, c.Endpoints(), "--password", "hunter2", "--user", "root", "run", "--key", "fenced", "--", "sh", "-c", script, "sh", dir)
	// What the command would otherwise inherit: a wrong cluster, and
	// nothing of the user's.
	r.Env = slices.DeleteFunc(r.Env, func(kv string) bool { return strings.HasPrefix(kv, "ETCDCTL_") })
	r.Env = append(r.Env, "ETCDCTL_ENDPOINTS=http://"+etcdtest.FreeAddr(t), "ETCDCTL_API=3")
	// --user without auth on the cluster: the server ignores it.
	log := startLogged(t, r, dir, "run")
	if code := exitOf(t, r); code != 0 {
		b, _ := os.ReadFile(log)
		t.Fatalf("run exited %d\n%s", code, b)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	txn, _ := os.ReadFile(filepath.Join(dir, "txn"))
	if !strings.Contains(string(env), "ETCDCTL_ENDPOINTS="+c.Endpoints()+"\n") || strings.Count(string(env), "ETCDCTL_ENDPOINTS=") != 1 {
		t.Errorf("the command's ETCDCTL_ENDPOINTS: want exactly fencerun's %s:\n%s", c.Endpoints(), env)
	}
	if strings.Contains(string(env), "hunter2") || strings.Contains(string(env), "ETCDCTL_PASSWORD") {
		t.Errorf("the command was given a password:\n%s", env)
	}
	if !strings.HasPrefix(string(txn), "SUCCESS") {
		t.Errorf("the fencing transaction in the command: %q, want SUCCESS", txn)
	}
}

// E9: release --force on a holder that is etcdctl lock says what really
// happens: etcdctl does not watch its lease, so its command runs on.
// Before, it said the command "is being stopped and it exits 76".
func TestEtcdReleaseOfEtcdctlHolderSaysItRunsOn(t *testing.T) {
	needEtcdctl(t)
	c := etcdtest.Start(t, etcdtest.Options{})
	dir := t.TempDir()
	h := etcdctl(c.Endpoints(), "lock", "ek", "--", "sh", "-c", `touch "$0"; sleep 600`, filepath.Join(dir, "held"))
	startLogged(t, h, dir, "etcdctl")
	waitFile(t, filepath.Join(dir, "held"))
	out, err := onEtcd(t, c.Endpoints(), "release", "--force", "ek").Output()
	if err != nil {
		t.Fatalf("release --force: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "exits 76") || !strings.Contains(string(out), "its command is not stopped") {
		t.Errorf("release --force of an etcdctl holder said:\n%s", out)
	}
}
