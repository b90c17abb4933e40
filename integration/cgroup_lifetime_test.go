package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// fencerunCgroups lists the cgroups fencerun made directly in cg.
func (cg *testCgroup) fencerunCgroups(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(cg.path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "fencerun-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// noCgroupWhileWaiting checks that a waiter in cg, queued, made no cgroup
// for its command: it makes one only once it holds the lease.
func (cg *testCgroup) noCgroupWhileWaiting(t *testing.T) {
	t.Helper()
	if made := cg.fencerunCgroups(t); len(made) != 0 {
		t.Errorf("the waiter made a cgroup for its command while it waits: %v", made)
	}
}

// A waiter makes no cgroup for its command while it waits: the cgroup is
// made once the lease is held, just before the start. So a wait that ends
// without the lease leaves none: given up (-w), busy without waiting (-n),
// ended by SIGTERM or SIGINT. The waiter runs in a cgroup of the test's
// own, below which fencerun would make its command's.
func TestWaitThatEndsLeavesNoCgroup(t *testing.T) {
	for _, end := range []string{"wait", "nowait", "sigterm", "sigint"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			holder := s.start(s.fencerun("holder", "run", "--key", "k", "--", "sleep", "1000"))
			s.waitHeld("k")
			cg := newTestCgroup(t)
			args := []string{"run", "--key", "k", "--name", "waiter"}
			want := 75 // the lease not acquired
			switch end {
			case "wait":
				args = append(args, "-w", "0.3s")
			case "nowait":
				args = append(args, "-n")
			case "sigterm":
				want = 128 + int(syscall.SIGTERM)
			case "sigint":
				want = 128 + int(syscall.SIGINT)
			}
			c := s.fencerun("waiter", append(args, "--", "touch", "ran")...)
			cg.start(t, c)
			if strings.HasPrefix(end, "sig") {
				s.waitQueue("k", "waiter")
				cg.noCgroupWhileWaiting(t)
				sig := syscall.SIGTERM
				if end == "sigint" {
					sig = syscall.SIGINT
				}
				if err := c.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			}
			if code := exitOf(t, c); code != want {
				t.Errorf("waiter: exit %d, want %d", code, want)
			}
			if _, err := os.Stat(s.path("ran")); err == nil {
				t.Error("the waiter's command ran without the lease")
			}
			if left := cg.fencerunCgroups(t); len(left) > 0 {
				t.Errorf("the waiter left its command's cgroup behind: %v", left)
			}
			if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := exitOf(t, holder); code != 128+int(syscall.SIGTERM) {
				t.Errorf("holder: exit %d, want %d", code, 128+int(syscall.SIGTERM))
			}
		})
	}
}

// A cgroup that cannot be made (cgroup.max.descendants 0 in the cgroup
// fencerun runs in) fails the run after the lease is taken: exit 125 naming the mkdir, the command not run,
// the lease free again, with --cgroup auto and require, waiting or not.
func TestCgroupThatCannotBeMade(t *testing.T) {
	for _, mode := range []string{"auto", "require"} {
		for _, waited := range []bool{false, true} {
			name := mode
			if waited {
				name += "/waited"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				s := newSandbox(t)
				cg := newTestCgroup(t)
				if err := os.WriteFile(filepath.Join(cg.path, "cgroup.max.descendants"), []byte("0"), 0); err != nil {
					t.Skipf("cannot limit the cgroup's descendants: %v", err)
				}
				if waited {
					if err := syscall.Mkfifo(s.path("go"), 0o600); err != nil {
						t.Fatal(err)
					}
					h := s.start(s.fencerun("holder", "run", "--key", "k", "--cgroup", "off", "--", "sh", "-c", "read x < go"))
					defer exitOf(t, h)
					s.waitHeld("k")
				}
				c := s.fencerun("run", "run", "--key", "k", "--name", "second", "--cgroup", mode, "--", "touch", "ran")
				cg.start(t, c)
				if waited {
					s.waitQueue("k", "second")
					if err := os.WriteFile(s.path("go"), []byte("\n"), 0); err != nil {
						t.Fatal(err)
					}
				}
				if code := exitOf(t, c); code != 125 {
					t.Errorf("exit %d, want 125", code)
				}
				log, _ := os.ReadFile(s.path("run.log"))
				if !strings.Contains(string(log), "creating cgroup") || !strings.Contains(string(log), cg.path) {
					t.Errorf("the error does not name the cgroup that could not be made:\n%s", log)
				}
				if _, err := os.Stat(s.path("ran")); err == nil {
					t.Error("the command ran")
				}
				if st := s.status("k"); st.State != "free" {
					t.Errorf("key state %q after the failed run, want free", st.State)
				}
			})
		}
	}
}

// A wrapper SIGKILLed while its command runs leaves its command's cgroup:
// the command dies of its parent-death signal, so the cgroup is empty, and
// only whoever stops the dead holder's leftovers can remove it (a cron
// job killed daily would otherwise leave one a day). The next holder of
// the key, or prune once the key is free, removes it, on both backends;
// the next holder's own cgroup goes with its normal exit.
func TestKilledHoldersCgroupIsRemoved(t *testing.T) {
	etcdtest.Need(t)
	eps := etcdtest.Start(t, etcdtest.Options{}).Endpoints()
	for _, backend := range []string{"file", "etcd"} {
		for _, by := range []string{"next holder", "prune"} {
			key := "killed-" + strings.ReplaceAll(by, " ", "-") // one etcd cluster for all
			t.Run(backend+"/"+by, func(t *testing.T) {
				t.Parallel()
				s := newSandbox(t)
				if backend == "etcd" {
					s.env = append(s.env, "FENCERUN_ETCD="+eps)
				}
				cg := newTestCgroup(t)
				c := s.fencerun("holder", "run", "--key", key, "--ttl", "2s", "--", "sh", "-c", "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 1000")
				cg.start(t, c)
				command := s.pids("pid")[0]
				// Once it is sleep, its mv is reaped: the SIGKILL then
				// leaves no process of the tree that ends by itself.
				if err := waitFor(func() bool {
					comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", command))
					return string(comm) == "sleep\n"
				}); err != nil {
					t.Fatal("the command never exec'd sleep")
				}
				made := cg.fencerunCgroups(t)
				if len(made) != 1 {
					t.Fatalf("the holder's cgroups: %v, want one", made)
				}
				if err := c.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				exitOf(t, c)
				waitGone(t, command)
				if cg.populated(t) || len(cg.fencerunCgroups(t)) != 1 {
					t.Fatalf("after the SIGKILL: %v left, processes %v; want the empty cgroup %s: the scenario did not happen", cg.fencerunCgroups(t), cg.procs(t), made[0])
				}
				switch by {
				case "next holder":
					if code := s.run("next", "run", "--key", key, "--", "true"); code != 0 {
						t.Fatalf("next holder: exit %d", code)
					}
				case "prune":
					if err := waitFor(func() bool { return s.status(key).State == "free" }); err != nil {
						t.Fatal("the dead holder's lease never expired")
					}
					if code := s.run("prune", "prune"); code != 0 {
						t.Fatalf("prune: exit %d", code)
					}
				}
				if left := cg.fencerunCgroups(t); len(left) > 0 {
					t.Errorf("after the %s: cgroups %v are left, want none (the dead holder's was %s)", by, left, made[0])
				}
			})
		}
	}
}
