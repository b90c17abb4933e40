package integration

import (
	"os"
	"syscall"
	"testing"
)

// S5 while stopping: after a cancel, the command is being stopped with a
// long grace; the lease is still kept and watched, so a revocation meanwhile
// cuts the grace short and the run exits 76.
func TestRevokedWhileCancelling(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", "2s", "--grace", "10m", "--",
		"sh", "-c", `trap '' TERM; touch ready; while :; do sleep 0.05; done`))
	waitFile(t, s.path("ready"))
	if code := s.run("cancel", "cancel", "job"); code != 0 {
		t.Fatalf("cancel: exit %d", code)
	}
	// The command ignores TERM: only the fence can end it before the grace.
	if code := s.run("release", "release", "job", "--force"); code != 0 {
		t.Fatalf("release --force: exit %d", code)
	}
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder: exit %d, want 76 (the fence broke while the command was being stopped)", code)
	}
}

// A resized terminal (SIGWINCH) does not end a wait for the lease.
func TestWinchWhileWaiting(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--", "sh", "-c",
		`touch held; while [ ! -e go ]; do sleep 0.05; done`))
	waitFile(t, s.path("held"))
	waiter := s.start(s.fencerun("waiter", "run", "--key", "job", "--name", "w", "--", "touch", "waiter-ran"))
	s.waitQueue("job", "w")
	if err := waiter.Process.Signal(syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, holder); code != 0 {
		t.Errorf("holder: exit %d", code)
	}
	if code := exitOf(t, waiter); code != 0 {
		t.Errorf("waiter: exit %d, want 0: SIGWINCH must not end the wait", code)
	}
	waitFile(t, s.path("waiter-ran"))
}
