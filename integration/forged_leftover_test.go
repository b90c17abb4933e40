package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// S9, issue 26 point 1: anyone who may write the cluster can put a
// leftover record naming another job's tick marker (its path is in
// /proc/net/unix) and cgroup (world-readable in /proc/PID/cgroup), with
// this host's name. Root's next etcd run of that key then stopped root's
// unrelated file-store job and removed its cgroup (4/4 in the probe). A
// record now directs signals only at a tree whose tick socket its run
// bound to that very record: the forged one stops nothing.
func TestForgedEtcdLeftoverStopsNothing(t *testing.T) {
	needEtcdctl(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the victim is root's own job, the runner root")
	}
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	s := newSandbox(t)
	// The victim: a file-store job, in a cgroup where one can be made.
	victim := s.start(s.fencerun("victim", "run", "--key", "victim", "--",
		"sh", "-c", `echo "$FENCERUN_TICK" > tick.tmp && mv tick.tmp tick; cat /proc/self/cgroup > cg.tmp && mv cg.tmp cg; echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 1000`))
	tick := strings.TrimSpace(waitFile(t, s.path("tick")))
	pid := readPids(waitPidFile(t, s.path("pid")))[0]
	cgroup := ""
	for _, line := range strings.Split(waitFile(t, s.path("cg")), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok && strings.Contains(rest, "fencerun-") {
			cgroup = filepath.Join("/sys/fs/cgroup/unified", rest)
		}
	}
	host, _ := os.Hostname()
	for i, rec := range []map[string]any{
		{"marker": "FENCERUN_TICK=" + tick, "host": host, "name": "forged", "pid": 999999, "fence": 1},
		{"marker": "FENCERUN_TICK=" + tick, "cgroup": cgroup, "host": host, "name": "forged", "pid": 999999, "fence": 1},
	} {
		data, _ := json.Marshal(rec)
		key := "forged" + string(rune('a'+i))
		if out, err := etcdctl(eps, "put", "_fencerun/leftovers/"+key+"/00000000000000ff", string(data)).CombinedOutput(); err != nil {
			t.Fatalf("etcdctl put: %v\n%s", err, out)
		}
		runner := onEtcd(t, eps, "run", "--key", key, "--", "true")
		runner.Env = append(runner.Env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		if out, err := runner.CombinedOutput(); err != nil {
			t.Logf("root's etcd run of %s: %v\n%s", key, err, out)
		}
		if !testsupport.Alive(pid) {
			t.Fatalf("record %d (%s): root's etcd run of %s stopped the unrelated file-store job (pid %d)", i, data, key, pid)
		}
		if cgroup != "" {
			if _, err := os.Stat(cgroup); err != nil {
				t.Fatalf("record %d: the victim's cgroup %s: %v", i, cgroup, err)
			}
		}
	}
	victim.Process.Signal(os.Interrupt)
	exitOf(t, victim)
}

// The marker-only variant against a third user (1/1 in the probe): a
// forged record naming another user's etcd job's tick marker made root's
// next etcd run kill that job. Its socket is bound to its own record, not
// to the forged one.
func TestForgedEtcdLeftoverSparesAnotherUsersJob(t *testing.T) {
	needEtcdctl(t)
	victim := addUser(t)
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	work := sharedDir(t)
	os.Chmod(work, 0o777)
	job := victim.as(exec.Command(bin, "--etcd", eps, "run", "--key", "vjob", "--",
		"sh", "-c", `echo "$FENCERUN_TICK" > tick.tmp && mv tick.tmp tick; echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 1000`))
	job.Dir = work
	job.Env = []string{"PATH=" + filepath.Dir(bin) + ":/usr/bin:/bin", "HOME=" + work, "TMPDIR=/tmp"}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { endRun(job.Process); job.Wait() })
	tick := strings.TrimSpace(waitFile(t, filepath.Join(work, "tick")))
	pid := readPids(waitPidFile(t, filepath.Join(work, "pid")))[0]
	host, _ := os.Hostname()
	data, _ := json.Marshal(map[string]any{"marker": "FENCERUN_TICK=" + tick, "host": host, "name": "forged", "pid": 999999, "fence": 1})
	if out, err := etcdctl(eps, "put", "_fencerun/leftovers/forgedv/00000000000000ff", string(data)).CombinedOutput(); err != nil {
		t.Fatalf("etcdctl put: %v\n%s", err, out)
	}
	runner := onEtcd(t, eps, "run", "--key", "forgedv", "--", "true")
	runner.Env = append(runner.Env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := runner.CombinedOutput(); err != nil {
		t.Logf("root's etcd run: %v\n%s", err, out)
	}
	if !testsupport.Alive(pid) {
		t.Fatalf("root's etcd run of forgedv stopped user %s's etcd job (pid %d) named by a forged record", victim.name, pid)
	}
	job.Process.Signal(syscall.SIGTERM)
	job.Wait()
}
