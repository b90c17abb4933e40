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

// E10: a waiter's interruption line names the holder as it is when the
// waiter is interrupted, not as the waiter first saw it: the holder it
// queued behind ("first") let go to the waiter ahead ("second") while it
// waited, and the line names "second". Logged at info, so the waiter's
// first look happens, and by default level, where it does not.
func TestEtcdInterruptedWaiterNamesTheHolderAfresh(t *testing.T) {
	for _, level := range []string{"info", "warn"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			c := etcdtest.Start(t, etcdtest.Options{})
			eps, cl := c.Endpoints(), c.Client()
			dir := t.TempDir()
			first := onEtcd(t, eps, "run", "--key", "fresh", "--name", "first", "--", "sh", "-c", holderScript, "sh", dir, "first")
			startLogged(t, first, dir, "first")
			waitFile(t, filepath.Join(dir, "first.started"))
			second := onEtcd(t, eps, "run", "--key", "fresh", "--name", "second", "--", "sh", "-c", holderScript, "sh", dir, "second")
			startLogged(t, second, dir, "second")
			waitContenders(t, cl, "fresh", 2)
			w := onEtcd(t, eps, "--log-level", level, "run", "--key", "fresh", "--name", "waiter", "--", "true")
			w.Env = slices.DeleteFunc(w.Env, func(kv string) bool { return strings.HasPrefix(kv, "FENCERUN_LOG_LEVEL=") })
			wlog := startLogged(t, w, dir, "waiter")
			waitContenders(t, cl, "fresh", 3)
			if err := os.WriteFile(filepath.Join(dir, "first.go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			waitFile(t, filepath.Join(dir, "second.started"))
			w.Process.Signal(os.Interrupt)
			exitOf(t, w)
			b, _ := os.ReadFile(wlog)
			if !strings.Contains(string(b), "interrupted by SIGINT while waiting for fresh: held by second") {
				t.Errorf("the interruption line does not name the holder now (second):\n%s", b)
			}
			os.WriteFile(filepath.Join(dir, "second.go"), nil, 0o600)
		})
	}
}
