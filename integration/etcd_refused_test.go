package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// E6: a waiter whose calls the cluster refuses, rather than leaves
// unanswered (its role's permission revoked while it waits), exits 125
// naming the refusal: no retry mends it, and its keep-alives, which need
// no key's permission, would keep it asking for ever.
func TestEtcdWaiterRefusedWhileWaitingExits125(t *testing.T) {
	needEtcdctl(t)
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	dir := t.TempDir()
	enableAuth(t, eps, "fr-rf-u", "fr-rf-r")
	user := []string{"--user", "fr-rf-u", "--password", "upw", "run", "--key", "rf", "--ttl", "2"}
	h := onEtcd(t, eps, append(user, "--", "sleep", "1000")...)
	hlog := startLogged(t, h, dir, "holder")
	waitLog(t, hlog, "acquired the lease")
	w := onEtcd(t, eps, append(user, "--", "touch", filepath.Join(dir, "w.started"))...)
	wlog := startLogged(t, w, dir, "waiter")
	waitLog(t, wlog, "waiting for the lease")

	revoke := []string{"--user", "root:rootpw", "role", "revoke-permission", "fr-rf-r", "--from-key", "0"}
	if out, err := etcdctl(eps, revoke...).CombinedOutput(); err != nil {
		t.Fatalf("etcdctl %v: %v\n%s", revoke, err, out)
	}
	// The holder dies; its lease goes within its TTL, and the waiter's
	// next take is refused.
	h.Process.Signal(syscall.SIGKILL)
	exited := make(chan error, 1)
	go func() { exited <- w.Wait() }()
	select {
	case err := <-exited:
		b, _ := os.ReadFile(wlog)
		if code := testsupport.ExitCode(t, err); code != 125 || !strings.Contains(string(b), "permission denied") {
			t.Errorf("waiter: exit %d, want 125 naming the permission denied:\n%s", code, b)
		}
	case <-time.After(time.Minute):
		b, _ := os.ReadFile(wlog)
		t.Fatalf("the waiter still waits a minute after its permission was revoked:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "w.started")); err == nil {
		t.Errorf("the waiter started its command without permission on its key")
	}
}

// waitLog waits until the log at path says what.
func waitLog(t *testing.T, path, what string) {
	t.Helper()
	if err := waitFor(func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), what)
	}); err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("%s never said %q:\n%s", filepath.Base(path), what, b)
	}
}
