package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A waiter SIGKILLed while it waits leaves the cgroup it made for its
// command (it is made while the lease is awaited); nothing records it. The
// next run in the same cgroup removes it once its own command runs: here
// that command waits for it to go (bounded: 20 s), so the test waits for
// a file, not a sleep. A prune sweeps it too, also one whose state root
// does not exist: a cgroup directory is the host's, not a state root's.
func TestKilledWaitersCgroupIsSwept(t *testing.T) {
	for _, by := range []string{"next run", "prune", "prune of a missing root"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			killedWaitersCgroup(t, by)
		})
	}
}

func killedWaitersCgroup(t *testing.T, by string) {
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "k", "--", "sleep", "1000"))
	s.waitHeld("k")
	cg := newTestCgroup(t)
	waiter := s.fencerun("waiter", "run", "--key", "k", "--name", "waiter", "--", "touch", "ran")
	cg.start(t, waiter)
	s.waitQueue("k", "waiter")
	if err := waitFor(func() bool { return len(cg.fencerunCgroups(t)) == 1 }); err != nil {
		t.Fatalf("the waiter made no cgroup for its command while it waited: %v", cg.fencerunCgroups(t))
	}
	left := filepath.Join(cg.path, cg.fencerunCgroups(t)[0])
	if err := waiter.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, waiter); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("waiter: exit %d, want %d", code, 128+int(syscall.SIGKILL))
	}
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the killed waiter's cgroup is not there to sweep (%v): the scenario did not happen", err)
	}
	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exitOf(t, holder)

	if by != "next run" {
		args := []string{"prune", "--json"}
		fresh := s.path("fresh")
		if by == "prune of a missing root" {
			args = append([]string{"--dir", fresh}, args...)
		}
		prune := s.fencerun("prune", args...)
		cg.start(t, prune)
		if code := exitOf(t, prune); code != 0 {
			t.Fatalf("prune: exit %d", code)
		}
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Errorf("prune made the missing state root %s (%v)", fresh, err)
		}
		out, _ := os.ReadFile(s.path("prune.log"))
		if _, err := os.Stat(left); !os.IsNotExist(err) {
			t.Errorf("prune left the killed waiter's cgroup %s (%v)", left, err)
		}
		if !strings.Contains(string(out), `"what": "dead run's cgroup"`) || !strings.Contains(string(out), `"path": "`+left+`"`) {
			t.Errorf("prune did not report the cgroup it removed:\n%s", out)
		}
		return
	}
	next := s.fencerun("next", "run", "--key", "k", "--", "sh", "-c",
		`i=0; while [ -d "$1" ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; [ ! -d "$1" ]`, "sh", left)
	cg.start(t, next)
	if code := exitOf(t, next); code != 0 {
		t.Errorf("next run: exit %d; the killed waiter's cgroup %s is still there", code, left)
	}
	if rest := cg.fencerunCgroups(t); len(rest) > 0 {
		t.Errorf("cgroups left after the next run: %v", rest)
	}
	if _, err := os.Stat(s.path("ran")); err == nil {
		t.Error("the killed waiter's command ran")
	}
}
