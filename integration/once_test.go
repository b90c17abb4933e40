package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// --once and --once-per end to end (O1-O4): concurrent runs of the built
// binary on one host's file store and as separate processes on a real
// etcd cluster, with a witness log that every run of the command appends
// to, so that exactly one success per period is counted, not assumed.

// onceBackend makes fencerun commands on one store: the file backend in a
// state root of the test's, or an etcd cluster of its own.
type onceBackend struct {
	name string
	cmd  func(args ...string) *exec.Cmd
}

func onceBackends(t *testing.T) []onceBackend {
	dir := t.TempDir()
	out := []onceBackend{{"file", func(args ...string) *exec.Cmd {
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), "FENCERUN_DIR="+dir, "FENCERUN_LOG_LEVEL=info")
		return c
	}}}
	if etcdtest.Binary() == "" {
		etcdtest.Need(t) // fails under CI, skips the etcd half elsewhere
		return out
	}
	eps := etcdtest.Start(t, etcdtest.Options{}).Endpoints()
	return append(out, onceBackend{"etcd", func(args ...string) *exec.Cmd {
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), "FENCERUN_ETCD="+eps, "FENCERUN_LOG_LEVEL=info", "FENCERUN_DIR="+dir)
		return c
	}})
}

// witnessScript appends "ID fence pid" to the witness log named by its
// first argument once the command runs under the lease, then sleeps its
// second argument (so that the other runs queue behind it) and exits with
// its third.
const witnessScript = `echo "$FENCERUN_ONCE $FENCERUN_FENCE $$" >> "$1"; sleep "$2"; exit "$3"`

// witnessed reads the witness log: the fences of the runs of each ID.
func witnessed(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			out[f[0]] = append(out[f[0]], f[1])
		}
	}
	return out
}

// onceRun is one finished run: its exit code and stderr.
type onceRun struct {
	code   int
	stderr string
}

func runOnce(t *testing.T, c *exec.Cmd) onceRun {
	t.Helper()
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return onceRun{code: c.ProcessState.ExitCode(), stderr: stderr.String()}
}

// oncePeriods is how many periods the concurrent test runs; FENCERUN_ONCE_PERIODS raises it (just once-soak).
func oncePeriods(t *testing.T) int {
	if v := os.Getenv("FENCERUN_ONCE_PERIODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FENCERUN_ONCE_PERIODS=%q", v)
		}
		return n
	}
	return 3
}

// Three runs start together at the start of each period of --once-per 2s,
// on one host's file store and as three processes on etcd: in every
// period exactly one runs its command (the witness log has one line for
// its ID), and the two others exit 0 without running it, each with the
// info line that names the run that did.
func TestOncePerPeriodConcurrent(t *testing.T) {
	const per, runs = 2 * time.Second, 3
	periods := oncePeriods(t)
	for _, b := range onceBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			witness := filepath.Join(t.TempDir(), "witness")
			var ids []string
			total, skipped := 0, 0
			for range periods {
				// Just after a period starts, so that the three compute
				// the same one; a run that computed the next would be
				// counted there, and the assertions below still hold.
				start := time.Now().Truncate(per).Add(per + 100*time.Millisecond)
				time.Sleep(time.Until(start))
				ids = append(ids, start.UTC().Truncate(per).Format(time.RFC3339))
				var wg sync.WaitGroup
				results := make([]onceRun, runs)
				for i := range runs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						results[i] = runOnce(t, b.cmd("run", "--key", "report", "--ttl", "3s", "--once-per", "2s", "--", "sh", "-c", witnessScript, "sh", witness, "0.5", "0"))
					}()
				}
				wg.Wait()
				for _, r := range results {
					total++
					if r.code != 0 {
						t.Errorf("a run exited %d, want 0: %s", r.code, r.stderr)
					}
					if strings.Contains(r.stderr, "was done by") {
						skipped++
					}
				}
			}
			seen := witnessed(t, witness)
			for _, id := range ids {
				if n := len(seen[id]); n != 1 {
					t.Errorf("period %s: %d successful runs (fences %v), want exactly 1", id, n, seen[id])
				}
			}
			for id, f := range seen {
				if len(f) != 1 {
					t.Errorf("ID %s ran %d times (fences %v)", id, len(f), f)
				}
			}
			if skipped != total-len(seen) {
				t.Errorf("%d runs said the ID was done, want %d (%d runs, %d ran)", skipped, total-len(seen), total, len(seen))
			}
			t.Logf("%s: %d runs, %d periods, successful runs per period: %v", b.name, total, len(ids), perPeriod(seen, ids))
			st := statusOut(t, b, "report")
			for _, id := range ids {
				if !strings.Contains(st, `"id": "`+id+`"`) {
					t.Errorf("status --json does not list the done ID %s: %s", id, st)
				}
			}
		})
	}
}

// perPeriod is how many successful runs each of ids had.
func perPeriod(seen map[string][]string, ids []string) []int {
	var out []int
	for _, id := range ids {
		out = append(out, len(seen[id]))
	}
	return out
}

// statusOut is status --json of key, on stdout.
func statusOut(t *testing.T, b onceBackend, key string) string {
	t.Helper()
	out, err := b.cmd("status", key, "--json").Output()
	if err != nil {
		t.Fatalf("status %s --json: %v", key, err)
	}
	return string(out)
}

// A run whose command fails leaves the ID open: the next run runs it, and
// the one after finds it done (exit --once-exit) without running.
func TestOnceFailedRunLeavesItOpen(t *testing.T) {
	for _, b := range onceBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			witness := filepath.Join(t.TempDir(), "witness")
			run := func(code string) onceRun {
				return runOnce(t, b.cmd("run", "--key", "nightly", "--once", "2026-12-04", "--once-exit", "9", "--", "sh", "-c", witnessScript, "sh", witness, "0", code))
			}
			if r := run("3"); r.code != 3 {
				t.Fatalf("the failing run exited %d, want its command's 3: %s", r.code, r.stderr)
			}
			if r := run("0"); r.code != 0 {
				t.Fatalf("the next run exited %d, want 0: %s", r.code, r.stderr)
			}
			if r := run("0"); r.code != 9 || !strings.Contains(r.stderr, "was done by") {
				t.Fatalf("the run after exited %d (want --once-exit 9) with %q", r.code, r.stderr)
			}
			if got := witnessed(t, witness)["2026-12-04"]; len(got) != 2 {
				t.Fatalf("the command ran %d times, want twice (the failure and the success): %v", len(got), got)
			}
			t.Logf("%s: 3 runs, 1 ID, 1 successful run (after 1 failed one)", b.name)
		})
	}
}

// A holder whose wrapper is SIGKILLed while its command runs marks
// nothing: the next run (once the key is free: at once on the file
// backend, after the TTL on etcd) runs the command again.
func TestOnceKilledHolderLeavesItOpen(t *testing.T) {
	for _, b := range onceBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			witness := filepath.Join(dir, "witness")
			h := b.cmd("run", "--key", "backup", "--ttl", "2s", "--once", "w49", "--", "sh", "-c", witnessScript, "sh", witness, "300", "0")
			if err := h.Start(); err != nil {
				t.Fatal(err)
			}
			defer h.Process.Kill()
			if err := waitFor(func() bool { return len(witnessed(t, witness)["w49"]) == 1 }); err != nil {
				t.Fatal("the first run's command never started")
			}
			h.Process.Signal(syscall.SIGKILL)
			h.Wait()
			r := runOnce(t, b.cmd("run", "--key", "backup", "--ttl", "2s", "--once", "w49", "--", "sh", "-c", witnessScript, "sh", witness, "0", "0"))
			if r.code != 0 || strings.Contains(r.stderr, "was done by") {
				t.Fatalf("the run after the killed one exited %d: %s", r.code, r.stderr)
			}
			if got := witnessed(t, witness)["w49"]; len(got) != 2 {
				t.Fatalf("the command ran %d times, want twice (killed, then done): %v", len(got), got)
			}
			if r := runOnce(t, b.cmd("run", "--key", "backup", "--once", "w49", "--", "false")); r.code != 0 || !strings.Contains(r.stderr, "was done by") {
				t.Fatalf("a third run exited %d: %s", r.code, r.stderr)
			}
		})
	}
}

// A revoked holder's success does not count: its command exits 0 when the
// revocation stops it, the holder exits 76, and the ID stays open for the
// next run.
func TestOnceRevokedHolderLeavesItOpen(t *testing.T) {
	for _, b := range onceBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			witness := filepath.Join(dir, "witness")
			// The command "succeeds" as it is stopped: exit 0 on TERM.
			script := `echo "$FENCERUN_ONCE $FENCERUN_FENCE $$" >> "$1"; trap 'exit 0' TERM; sleep 300 & wait`
			h := b.cmd("run", "--key", "close", "--once", "q4", "--", "sh", "-c", script, "sh", witness)
			var stderr bytes.Buffer
			h.Stderr = &stderr
			if err := h.Start(); err != nil {
				t.Fatal(err)
			}
			defer h.Process.Kill()
			if err := waitFor(func() bool { return len(witnessed(t, witness)["q4"]) == 1 }); err != nil {
				t.Fatal("the first run's command never started")
			}
			if out, err := b.cmd("release", "close", "--force").CombinedOutput(); err != nil {
				t.Fatalf("release --force: %v: %s", err, out)
			}
			h.Wait()
			if code := h.ProcessState.ExitCode(); code != 76 {
				t.Fatalf("the revoked holder exited %d, want 76: %s", code, stderr.String())
			}
			r := runOnce(t, b.cmd("run", "--key", "close", "--once", "q4", "--", "sh", "-c", witnessScript, "sh", witness, "0", "0"))
			if r.code != 0 || strings.Contains(r.stderr, "was done by") {
				t.Fatalf("the run after the revoked one exited %d: %s", r.code, r.stderr)
			}
			if got := witnessed(t, witness)["q4"]; len(got) != 2 {
				t.Fatalf("the command ran %d times, want twice (revoked, then done): %v", len(got), got)
			}
		})
	}
}

// A waiter whose ID another run marks done while it waits gives up at
// once, though the key then goes to a run of another ID ahead of it in the
// queue, whose command is still running when the waiter exits 0.
func TestOnceWaiterGivesUpWhenItsIDIsDone(t *testing.T) {
	for _, b := range onceBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			witness := filepath.Join(dir, "witness")
			// Runs until the file named by its second argument appears.
			script := `echo "$FENCERUN_ONCE $FENCERUN_FENCE $$" >> "$1"; while [ ! -e "$2" ]; do sleep 0.05; done`
			start := func(id, name string) *exec.Cmd {
				c := b.cmd("run", "--key", "mixed", "--once", id, "--", "sh", "-c", script, "sh", witness, filepath.Join(dir, name))
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { endRun(c.Process); c.Wait() })
				return c
			}
			waiters := func(n int) {
				t.Helper()
				if err := waitFor(func() bool { return strings.Count(statusOut(t, b, "mixed"), `"since"`) == n }); err != nil {
					t.Fatalf("never %d waiters: %s", n, statusOut(t, b, "mixed"))
				}
			}
			start("x", "h.go")
			if err := waitFor(func() bool { return len(witnessed(t, witness)["x"]) == 1 }); err != nil {
				t.Fatal("the holder of x never ran")
			}
			start("y", "z.go")
			waiters(1)
			w := b.cmd("run", "--key", "mixed", "--once", "x", "--", "sh", "-c", witnessScript, "sh", witness, "0", "0")
			var stderr bytes.Buffer
			w.Stderr = &stderr
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { endRun(w.Process) })
			waiters(2)
			os.WriteFile(filepath.Join(dir, "h.go"), nil, 0o600) // x is done; y's run takes the key
			exited := make(chan error, 1)
			go func() { exited <- w.Wait() }()
			select {
			case err := <-exited:
				if err != nil || !strings.Contains(stderr.String(), "was done by") {
					t.Fatalf("the waiter for x exited %v: %s", err, stderr.String())
				}
			case <-time.After(guard):
				t.Fatalf("the waiter for x still waits behind y's run, %v after x was done", guard)
			}
			// y's run holds the key, its command running till z.go.
			if err := waitFor(func() bool { return len(witnessed(t, witness)["y"]) == 1 }); err != nil {
				t.Fatal("y's run never ran")
			}
			if got := witnessed(t, witness)["x"]; len(got) != 1 {
				t.Fatalf("x ran %d times: %v", len(got), got)
			}
			os.WriteFile(filepath.Join(dir, "z.go"), nil, 0o600)
		})
	}
}

// O1 across users: in a group store, runs of one ID by root and two
// members at once run the command once; the done file gets the store's
// mode and group, so a member's once-reset reopens what root did.
func TestOnceAcrossUsersOfAGroupStore(t *testing.T) {
	group, gid := addGroup(t)
	alice, bob := addUser(t, group), addUser(t, group)
	base := sharedDir(t)
	storeDir := filepath.Join(base, "store")
	if code, out := runAs(t, nil, base, "init", "--group", group, storeDir); code != 0 {
		t.Fatalf("init: exit %d: %s", code, out)
	}
	witness := filepath.Join(base, "witness")
	os.WriteFile(witness, nil, 0o666)
	os.Chmod(witness, 0o666)
	run := func(u *testUser) (int, string) {
		return runAs(t, u, base, "--dir", storeDir, "--log-level", "info", "run", "--key", "close", "--once", "2026-11", "--", "sh", "-c", `echo "$FENCERUN_ONCE $FENCERUN_FENCE $(id -u)" >> "$1"; sleep 0.3`, "sh", witness)
	}
	var wg sync.WaitGroup
	skipped := 0
	var mu sync.Mutex
	for _, u := range []*testUser{nil, &alice, &bob} {
		wg.Go(func() {
			code, out := run(u)
			if code != 0 {
				t.Errorf("run as %v: exit %d: %s", u, code, out)
			}
			if strings.Contains(out, "was done by") {
				mu.Lock()
				skipped++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got := witnessed(t, witness)["2026-11"]; len(got) != 1 || skipped != 2 {
		t.Fatalf("3 users' runs: the command ran %d times (%v), %d said it was done; want 1 and 2", len(got), got, skipped)
	}
	var st syscall.Stat_t
	done := filepath.Join(storeDir, "keys", "k-close", "done")
	if err := syscall.Stat(done, &st); err != nil || st.Mode&0o7777 != 0o660 || int(st.Gid) != gid {
		t.Errorf("%s: mode %#o group %d (%v), want 0660 group %d", done, st.Mode&0o7777, st.Gid, err, gid)
	}
	if code, out := runAs(t, &bob, base, "--dir", storeDir, "once-reset", "close", "2026-11", "--force"); code != 0 || !strings.Contains(out, "reopened") {
		t.Fatalf("once-reset as a member: exit %d: %s", code, out)
	}
	if code, out := run(&alice); code != 0 || strings.Contains(out, "was done by") {
		t.Fatalf("a run after once-reset: exit %d: %s", code, out)
	}
	if got := witnessed(t, witness)["2026-11"]; len(got) != 2 {
		t.Fatalf("after once-reset the command ran %d times in all, want 2: %v", len(got), got)
	}
}

// A fencerun nested in an --once run's command does not take the
// command's FENCERUN_ONCE for its own --once: two nested runs of another
// key both run.
func TestOnceNotInheritedByANestedRun(t *testing.T) {
	dir := t.TempDir()
	witness := filepath.Join(dir, "witness")
	nested := bin + ` run --key inner -- sh -c 'echo "inner $FENCERUN_FENCE x" >> "$1"' sh "$1"`
	c := fencerun(dir, "run", "--key", "outer", "--once", "o1", "--", "sh", "-c", nested+"; "+nested, "sh", witness)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("outer run: %v: %s", err, out)
	}
	if got := witnessed(t, witness)["inner"]; len(got) != 2 {
		t.Fatalf("the nested runs ran %d times, want 2: %v", len(got), got)
	}
}

// A cancelled holder and one stopped by --timeout mark nothing either,
// though their commands exit 0 as they are stopped: the holder exits 77
// or 124, and the ID stays open for the next run.
func TestOnceCancelledOrTimedOutHolderLeavesItOpen(t *testing.T) {
	script := `echo "$FENCERUN_ONCE $FENCERUN_FENCE $$" >> "$1"; trap 'exit 0' TERM; sleep 300 & wait`
	for _, b := range onceBackends(t) {
		for _, way := range []struct {
			name  string
			flags []string
			stop  func(key string) // nil: --timeout stops it
			want  int
		}{
			{"cancel", nil, func(key string) {
				if out, err := b.cmd("cancel", key).CombinedOutput(); err != nil {
					t.Errorf("cancel: %v: %s", err, out)
				}
			}, 77},
			{"timeout", []string{"--timeout", "2s"}, nil, 124},
		} {
			t.Run(b.name+"/"+way.name, func(t *testing.T) {
				witness, key := filepath.Join(t.TempDir(), "witness"), "stopped-"+way.name
				args := append([]string{"run", "--key", key, "--once", "q5"}, way.flags...)
				h := b.cmd(append(args, "--", "sh", "-c", script, "sh", witness)...)
				var stderr bytes.Buffer
				h.Stderr = &stderr
				if err := h.Start(); err != nil {
					t.Fatal(err)
				}
				defer h.Process.Kill()
				if err := waitFor(func() bool { return len(witnessed(t, witness)["q5"]) == 1 }); err != nil {
					t.Fatal("the first run's command never started")
				}
				if way.stop != nil {
					way.stop(key)
				}
				h.Wait()
				if code := h.ProcessState.ExitCode(); code != way.want {
					t.Fatalf("the stopped holder exited %d, want %d: %s", code, way.want, stderr.String())
				}
				r := runOnce(t, b.cmd("run", "--key", key, "--once", "q5", "--", "sh", "-c", witnessScript, "sh", witness, "0", "0"))
				if r.code != 0 || strings.Contains(r.stderr, "was done by") {
					t.Fatalf("the run after the stopped one exited %d: %s", r.code, r.stderr)
				}
				if got := witnessed(t, witness)["q5"]; len(got) != 2 {
					t.Fatalf("the command ran %d times, want twice (stopped, then done): %v", len(got), got)
				}
			})
		}
	}
}
