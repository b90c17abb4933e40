package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// tickScript writes the command's tick socket path to tick and its pid to
// pids, then waits for the file go to tick once (exit status to ticked)
// and sleeps.
const tickScript = `echo "$FENCERUN_TICK" > tick.tmp && mv tick.tmp tick; echo $$ > pids; ` +
	`while [ ! -e go ]; do sleep 0.05; done; fencerun tick; echo $? > ticked.tmp && mv ticked.tmp ticked; exec sleep 1000`

// prunedPaths runs prune --json with c and returns the paths of what it
// removed as "stale socket".
func prunedPaths(t *testing.T, out []byte) []string {
	t.Helper()
	var removed []struct{ What, Path string }
	if err := json.Unmarshal(out, &removed); err != nil {
		t.Fatalf("prune --json: %v\n%s", err, out)
	}
	var paths []string
	for _, r := range removed {
		if r.What == "stale socket" {
			paths = append(paths, r.Path)
		}
	}
	slices.Sort(paths)
	return paths
}

// notifySockets are the holder sockets (n-*) in key's directory.
func notifySockets(t *testing.T, state, key string) []string {
	t.Helper()
	dir := filepath.Join(state, "keys", "k-"+key) // encodeKey of a plain key
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "n-") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// A SIGKILLed wrapper leaves its tick socket in the state root's ticks/
// and its notification socket in its key's directory (until a next holder
// takes the key); prune removes those, and only those: a live run's
// sockets stay and keep working (its command ticks, and release --force
// reaches it at once).
func TestPruneRemovesTheSocketsOfDeadRuns(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	for _, d := range []string{"dead", "live"} {
		os.Mkdir(s.path(d), 0o700)
	}
	dead := s.fencerun("dead", "run", "--key", "job", "--ttl", "1m", "--", "sh", "-c", tickScript)
	dead.Dir = s.path("dead")
	s.start(dead)
	deadTick := strings.TrimSpace(waitFile(t, s.path("dead/tick")))
	deadPid := readPids(waitPidFile(t, s.path("dead/pids")))
	deadNotify := notifySockets(t, s.state, "job")
	killWrapper(t, dead, deadPid[0])

	live := s.fencerun("live", "run", "--key", "other", "--ttl", "1m", "--", "sh", "-c", tickScript)
	live.Dir = s.path("live")
	s.start(live)
	liveTick := strings.TrimSpace(waitFile(t, s.path("live/tick")))
	liveNotify := notifySockets(t, s.state, "other")
	for _, p := range append([]string{deadTick, liveTick}, append(deadNotify, liveNotify...)...) {
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("%s: %v, %v; want a socket", p, fi, err)
		}
	}
	if len(deadNotify) != 1 || len(liveNotify) != 1 {
		t.Fatalf("notification sockets %q and %q, want one each", deadNotify, liveNotify)
	}

	out, err := fencerun(s.state, "prune", "--json").Output()
	if err != nil {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	want := []string{deadNotify[0], deadTick}
	slices.Sort(want)
	if got := prunedPaths(t, out); !slices.Equal(got, want) {
		t.Errorf("prune removed the stale sockets %q, want the dead run's %q:\n%s", got, want, out)
	}
	for _, p := range want {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s after prune: %v, want it removed", p, err)
		}
	}
	for _, p := range []string{liveTick, liveNotify[0]} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("the live run's socket %s after prune: %v", p, err)
		}
	}

	// The live run's sockets still work.
	os.WriteFile(s.path("live/go"), nil, 0o600)
	if got := strings.TrimSpace(waitFile(t, s.path("live/ticked"))); got != "0" {
		t.Errorf("the live run's tick after prune exited %s, want 0", got)
	}
	if out, err := fencerun(s.state, "release", "--force", "other").CombinedOutput(); err != nil {
		t.Fatalf("release --force: %v\n%s", err, out)
	}
	if code := exitOf(t, live); code != 76 {
		t.Errorf("live holder after release --force: exit %d, want 76", code)
	}
	if out, err := fencerun(s.state, "prune", "--json").Output(); err != nil || len(prunedPaths(t, out)) != 0 {
		t.Errorf("a second prune: %v, want no stale socket:\n%s", err, out)
	}
}

// On etcd, the tick socket lives in the user's private directory of
// $TMPDIR and the run's Close removes it; a SIGKILLed run leaves it, and
// prune (or the next run, as it starts) removes it. A live run's socket
// stays.
func TestEtcdPruneRemovesTheTickDirectoriesOfDeadRuns(t *testing.T) {
	needEtcdctl(t)
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	tmp := t.TempDir()
	onTmp := func(args ...string) *exec.Cmd {
		cmd := onEtcd(t, eps, args...)
		cmd.Env = append(cmd.Env, "TMPDIR="+tmp, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		return cmd
	}
	dead := onTmp("run", "--key", "dead", "--ttl", "2", "--", "sh", "-c", tickScript)
	startLogged(t, dead, t.TempDir(), "dead")
	deadTick := strings.TrimSpace(waitFile(t, filepath.Join(dead.Dir, "tick")))
	deadPid := readPids(waitPidFile(t, filepath.Join(dead.Dir, "pids")))
	killWrapper(t, dead, deadPid[0])
	live := onTmp("run", "--key", "live", "--ttl", "2", "--", "sh", "-c", tickScript)
	startLogged(t, live, t.TempDir(), "live")
	liveTick := strings.TrimSpace(waitFile(t, filepath.Join(live.Dir, "tick")))
	if filepath.Dir(filepath.Dir(deadTick)) != tmp || filepath.Dir(filepath.Dir(liveTick)) != tmp {
		t.Fatalf("tick sockets %s and %s, want them in directories of %s", deadTick, liveTick, tmp)
	}

	out, err := onTmp("prune", "--json").Output()
	if err != nil {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	// The live run removed it as it started, or prune did.
	if got := prunedPaths(t, out); len(got) > 0 && !slices.Equal(got, []string{deadTick}) {
		t.Errorf("prune removed the stale sockets %q, want at most the dead run's %s:\n%s", got, deadTick, out)
	}
	if _, err := os.Lstat(deadTick); !os.IsNotExist(err) {
		t.Errorf("the dead run's tick socket after prune: %v, want it removed", err)
	}
	if _, err := os.Lstat(liveTick); err != nil {
		t.Errorf("the live run's tick socket after prune: %v", err)
	}
	os.WriteFile(filepath.Join(live.Dir, "go"), nil, 0o600)
	if got := strings.TrimSpace(waitFile(t, filepath.Join(live.Dir, "ticked"))); got != "0" {
		t.Errorf("the live run's tick after prune exited %s, want 0", got)
	}
	live.Process.Signal(syscall.SIGTERM)
	exitOf(t, live)
	if _, err := os.Lstat(liveTick); !os.IsNotExist(err) {
		t.Errorf("the live run's tick socket after it ended: %v, want it removed by its Close", err)
	}
}
