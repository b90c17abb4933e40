package integration

import (
	"cmp"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// historyOf is `fencerun history KEY --json`, run by cmd.
func historyOf(t *testing.T, cmd func(args ...string) *exec.Cmd, key string) []store.Holding {
	t.Helper()
	out, err := cmd("history", key, "--json").Output()
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var hs []store.Holding
	if err := json.Unmarshal(out, &hs); err != nil {
		t.Fatalf("history --json: %v\n%s", err, out)
	}
	return hs
}

func endings(hs []store.Holding) []string {
	var out []string
	for _, h := range hs {
		if h.Ending == nil {
			out = append(out, "holding")
		} else {
			out = append(out, string(h.Ending.How))
		}
	}
	return out
}

// The history as holders die at each step (N2): a waiter killed while it
// waits leaves no holding; a holder killed while its command runs leaves
// its start, which reads "unknown (holder died)" once the next holder took
// the key; a holder revoked by release --force reads revoked, by whom,
// though it says lost itself at its release. On both backends.
func TestHistoryHoldersKilled(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		historyKilled(t, func(args ...string) *exec.Cmd { return fencerun(dir, args...) })
	})
	t.Run("etcd", func(t *testing.T) {
		c := etcdtest.Start(t, etcdtest.Options{})
		eps := c.Endpoints()
		historyKilled(t, func(args ...string) *exec.Cmd { return onEtcd(t, eps, args...) })
	})
}

func historyKilled(t *testing.T, cmd func(args ...string) *exec.Cmd) {
	dir := t.TempDir()
	started := func(name string) string { return filepath.Join(dir, name) }
	holder := cmd("run", "--key", "hk", "--name", "killed", "--ttl", "2", "--", "sh", "-c", `touch "$0"; exec sleep 60`, started("a"))
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, started("a"))
	waiter := cmd("run", "--key", "hk", "--name", "waiter", "--ttl", "2", "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() bool {
		out, _ := cmd("status", "hk").Output()
		return strings.Contains(string(out), "waiters:")
	}); err != nil {
		t.Fatal("the waiter never queued")
	}
	waiter.Process.Kill() // while it waits
	waiter.Wait()
	holder.Process.Signal(syscall.SIGKILL) // while its command runs
	holder.Wait()

	revoked := cmd("run", "--key", "hk", "--name", "revoked", "--", "sh", "-c", `touch "$0"; exec sleep 60`, started("b"))
	if err := revoked.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, started("b"))
	if out, err := cmd("release", "hk", "--force").CombinedOutput(); err != nil {
		t.Fatalf("release --force: %v\n%s", err, out)
	}
	if code := exitOf(t, revoked); code != 76 {
		t.Fatalf("the revoked holder exited %d, want 76", code)
	}
	if out, err := cmd("run", "--key", "hk", "--name", "last", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	hs := historyOf(t, cmd, "hk")
	if got := strings.Join(endings(hs), ","); got != "unknown (holder died),revoked,exited" {
		t.Fatalf("endings %s, want unknown (holder died),revoked,exited (no holding of the waiter)", got)
	}
	if hs[0].Name != "killed" || hs[0].PID != holder.Process.Pid || !hs[0].End.IsZero() {
		t.Errorf("the killed holder's holding %+v: want its name and pid, no end", hs[0])
	}
	if hs[1].Name != "revoked" || !strings.HasPrefix(hs[1].Ending.By, "pid ") || hs[1].End.IsZero() {
		t.Errorf("the revoked holding %+v (%+v): want who revoked it, and its end", hs[1], hs[1].Ending)
	}
	if hs[2].Ending.ExitStatus == nil || *hs[2].Ending.ExitStatus != 0 {
		t.Errorf("the last holding's exit status %v, want 0", hs[2].Ending.ExitStatus)
	}
	if out, _ := cmd("history", "hk").Output(); !strings.Contains(string(out), "revoked by pid ") || !strings.Contains(string(out), "unknown (holder died)") {
		t.Errorf("history says:\n%s", out)
	}
}

// A holding that waited starts when its waiter took the key, not when it
// queued: the history of a key never shows two holdings at once.
func TestHistoryWaiterStartsWhenItHolds(t *testing.T) {
	for _, b := range onceBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "gate")
			h := b.cmd("run", "--key", "turns", "--", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.05; done`, "sh", gate)
			if err := h.Start(); err != nil {
				t.Fatal(err)
			}
			defer endRun(h.Process)
			if err := waitFor(func() bool { return strings.Contains(statusOut(t, b, "turns"), `"state": "held"`) }); err != nil {
				t.Fatal("the holder never held")
			}
			w := b.cmd("run", "--key", "turns", "--", "true")
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			defer endRun(w.Process)
			if err := waitFor(func() bool { return strings.Contains(statusOut(t, b, "turns"), `"pid": `+strconv.Itoa(w.Process.Pid)) }); err != nil {
				t.Fatal("the waiter never queued")
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := h.Wait(); err != nil {
				t.Fatalf("holder: %v", err)
			}
			if err := w.Wait(); err != nil {
				t.Fatalf("waiter: %v", err)
			}
			hs := historyOf(t, b.cmd, "turns")
			slices.SortFunc(hs, func(x, y store.Holding) int { return cmp.Compare(x.Fence, y.Fence) })
			if len(hs) != 2 {
				t.Fatalf("%d holdings, want 2: %+v", len(hs), hs)
			}
			if hs[1].Start.Before(hs[0].End) {
				t.Fatalf("the waiter's holding starts at %s, before the holder's ended at %s", hs[1].Start, hs[0].End)
			}
		})
	}
}
