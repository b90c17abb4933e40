package integration

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// exhaustInotify opens inotify instances until the kernel refuses one
// (fs.inotify.max_user_instances, counted per user), prints how many it
// got and why it stopped, and keeps them until killed.
const exhaustInotify = `
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while libc.inotify_init1(0o2000000) >= 0:
    n += 1
print(n, os.strerror(ctypes.get_errno()), flush=True)
time.sleep(3600)
`

// M1, D84: a head waiter that may take any of several busy slots waits
// on them through an inotify instance. A user whose instances are all in
// use (128 by default, shared by every program of theirs: editors,
// containers) still gets a slot once one is freed; before, the waiter
// exited 125 ("inotify: too many open files") at once.
func TestSlotsHeadWaitWithoutInotify(t *testing.T) {
	u := addUser(t)
	t.Parallel()
	work := filepath.Join(sharedDir(t), "w")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	path := func(name string) string { return filepath.Join(work, name) }
	run := func(name string, argv ...string) *exec.Cmd {
		args := append([]string{"--dir", path("state"), "--log-level", "debug", "run", "--key", "pool", "--slots", "2", "--name", name, "--"}, argv...)
		c := u.as(exec.Command(bin, args...))
		c.Dir, c.Env = work, []string{"PATH=/usr/bin:/bin", "HOME=" + work}
		log, err := os.Create(path(name + ".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		c.Stdout, c.Stderr = log, log
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(path(name + ".log"))
				t.Logf("%s.log:\n%s", name, b)
			}
		})
		return c
	}
	holder := `touch run.$0; while [ ! -e go ]; do sleep 0.01; done`
	hs := []*exec.Cmd{run("h0", "sh", "-c", holder, "h0"), run("h1", "sh", "-c", holder, "h1")}
	waitFile(t, path("run.h0"))
	waitFile(t, path("run.h1"))

	ex := u.as(exec.Command("/usr/bin/python3", "-c", exhaustInotify))
	out, err := ex.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Process.Kill(); ex.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if f := strings.Fields(line); len(f) == 0 || f[0] == "0" || !strings.Contains(line, "Too many open files") {
		t.Fatalf("could not use up the user's inotify instances: %q", line)
	}

	w := run("w", "touch", "w-ran")
	if err := waitFor(func() bool {
		b, _ := os.ReadFile(path("w.log"))
		return strings.Contains(string(b), "waiting for the lease")
	}); err != nil {
		t.Fatal("the waiter never queued")
	}
	if err := os.WriteFile(path("go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		if code := exitOf(t, h); code != 0 {
			t.Errorf("h%d exited %d", i, code)
		}
	}
	if code := exitOf(t, w); code != 0 {
		t.Errorf("the waiter exited %d, want 0 (it waits, with or without inotify)", code)
	}
	if _, err := os.Stat(path("w-ran")); err != nil {
		t.Error("the waiter's command never ran")
	}
}

// As TestSlotsHeadWaitWithoutInotify, with an instance but room for one
// watch only (max_inotify_watches 1, set in a user namespace of the
// waiter's own): the second slot's watch fails with ENOSPC, and the wait
// goes on without inotify.
func TestSlotsHeadWaitWithoutInotifyWatches(t *testing.T) {
	needRoot(t)
	t.Parallel()
	s := newSandbox(t)
	hs := s.startSlots("pool", 3)
	w := s.fencerun("w", "run", "--key", "pool", "--slots", "3", "--", "touch", "w-ran")
	limit := `echo 1 > /proc/sys/user/max_inotify_watches && exec "$@"`
	w.Args = append([]string{"unshare", "-U", "-r", "sh", "-c", limit, "sh"}, w.Args...)
	w.Path = "/usr/bin/unshare"
	s.start(w)
	s.waitMany("pool", 3, 1)
	s.letGo("h1")
	if code := exitOf(t, w); code != 0 {
		t.Errorf("the waiter exited %d, want 0 (it waits, with or without inotify)", code)
	}
	if _, err := os.Stat(s.path("w-ran")); err != nil {
		t.Error("the waiter's command never ran")
	}
	if b, _ := os.ReadFile(s.path("w.log")); !strings.Contains(string(b), "no inotify instance or watch") {
		t.Errorf("the waiter waited with inotify: the test tested nothing:\n%s", b)
	}
	os.WriteFile(s.path("go"), nil, 0o600)
	for _, c := range hs {
		exitOf(t, c)
	}
	s.noBad()
}

// M1, D84: a head waiter without /proc (a mount namespace that has none,
// as a pid namespace without its own may be) cannot watch the
// slots through /proc/self/fd; it looks at them every 100 ms instead, and
// takes a freed slot. Before, it exited 125 ("watch .../live: no such
// file or directory").
func TestSlotsHeadWaitWithoutProc(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	// A short state path: a socket path too long for sockaddr_un is bound
	// through /proc (internal/unixsock), which this waiter has not.
	short, err := os.MkdirTemp("", "np")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	s.state = short
	hs := s.startSlots("pool", 2)
	w := s.fencerun("w", "run", "--key", "pool", "--slots", "2", "--name", "w", "--wait", "1m", "--", "touch", "w.ran")
	w.Args = append([]string{"unshare", "-m", "sh", "-c", `umount -l /proc && exec "$@"`, "sh"}, w.Args...)
	w.Path = "/usr/bin/unshare"
	s.start(w)
	s.waitMany("pool", 2, 1)
	s.letGo("h0")
	if code := exitOf(t, hs[0]); code != 0 {
		t.Errorf("h0 exited %d", code)
	}
	if code := exitOf(t, w); code != 0 {
		t.Errorf("the waiter without /proc exited %d, want 0", code)
	}
	if _, err := os.Stat(s.path("w.ran")); err != nil {
		t.Errorf("the waiter's command never ran: %v", err)
	}
	s.letGo("h1")
	exitOf(t, hs[1])
	s.noBad()
}
