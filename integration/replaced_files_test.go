package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// S9: a holder keeps its key's guard and record open for its renewals;
// when either is unlinked or replaced under it (a cleanup script, a
// restore of a copy), it loses its fence within a second and exits 76,
// and a newcomer started after the change does not start its command
// while the holder's tree lives (it waits on live, which the holder still
// holds). The commands hold flock(1) on one file without waiting: an
// overlap would make the newcomer's flock fail.
func TestGuardOrRecordReplacedNoOverlap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, log, ttl string
		replace              bool
	}{
		{"guard unlinked", "guard", "guard lock file", "3s", false},
		{"guard replaced", "guard", "guard lock file", "3s", true},
		{"record replaced", "lease", "lease record", "3s", true},
		// Renewed every 10s: the one-second path check sees it.
		{"record replaced, default TTL", "lease", "lease record", "30s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			excl := s.path("excl")
			holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", tc.ttl, "--grace", "2s", "--",
				"flock", "-n", excl, "sh", "-c", `trap "" TERM; echo $$ > pids.tmp && mv pids.tmp pids; exec sleep 1000`))
			pids := s.pids("pids")
			s.waitHeld("job")

			path := filepath.Join(s.state, "keys", "k-job", tc.file)
			changed := time.Now()
			if tc.replace {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path+".copy", data, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(path+".copy", path); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			second := s.start(s.fencerun("second", "run", "--key", "job", "--",
				"flock", "-n", excl, "sh", "-c", "touch second-ran"))
			took := s.lostWithoutOverlap(holder, second, pids, changed, "its "+tc.file+" was changed")
			t.Logf("holder exited %v after the change", took)
			s.logSays("holder", tc.log)
		})
	}
}

// lostWithoutOverlap checks the end of a holder whose state was changed
// under it at changed (what, for messages): it exits 76 and its tree (pids)
// goes, and only then does second, a newcomer whose command is `flock -n`
// on the holder's command's file and `touch second-ran`, run its command
// and exit 0. It returns how long after changed the holder exited, which
// must be within a second (a renewal or the path check) plus the holder's
// 2s grace for a command that ignores TERM: 5s is that with margin.
func (s *sandbox) lostWithoutOverlap(holder, second *exec.Cmd, pids []int, changed time.Time, what string) time.Duration {
	t := s.t
	t.Helper()
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder whose %s: exit %d, want 76", what, code)
	}
	took := time.Since(changed)
	waitGone(t, pids...)
	if code := exitOf(t, second); code != 0 {
		t.Fatalf("newcomer: exit %d, want 0 (1: its flock found the holder's command still running)", code)
	}
	if _, err := os.Stat(s.path("second-ran")); err != nil {
		t.Fatal("the newcomer's command never ran")
	}
	if took > 5*time.Second {
		t.Errorf("the holder took %v to stop after %s", took, what)
	}
	return took
}

// S9: a key directory moved away and a symlink to it planted under its
// name (`mv k-job k-old; ln -s k-old k-job`) is a moved key directory: the
// holder loses its fence within a second and exits 76, as for a plain
// move. Newcomers refuse the symlink (125), so nobody could take the key
// while the holder ran on; before, its path check followed the symlink to
// the directory it held, and it ran on for good (632 s, until killed).
func TestKeyDirectoryReplacedBySymlinkIsLost(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--grace", "2s", "--",
		"sh", "-c", `trap "" TERM; echo $$ > pids.tmp && mv pids.tmp pids; exec sleep 1000`))
	pids := s.pids("pids")
	s.waitHeld("job")

	keyDir := filepath.Join(s.state, "keys", "k-job")
	moved := time.Now()
	if err := os.Rename(keyDir, filepath.Join(s.state, "keys", "k-old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("k-old", keyDir); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder whose key directory was replaced by a symlink to it: exit %d, want 76", code)
	}
	took := waitGoneTimed(t, moved, pids...)
	t.Logf("holder and its tree gone %v after the change", took)
	s.logSays("holder", "was moved or deleted")
}

// S6: a key's lock file made a second name of its guard by hand (ln -f
// guard live) would look held for good to every acquirer, which holds the
// guard while it looks: run refuses it as corrupt state naming both files
// (125, the command not started), and release --force clears it, after
// which the key is taken as before.
func TestLiveLinkedToTheGuardIsCorrupt(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	if code := s.run("first", "run", "--key", "job", "--", "true"); code != 0 {
		t.Fatalf("first run: exit %d", code)
	}
	kd := filepath.Join(s.state, "keys", "k-job")
	if err := os.Remove(filepath.Join(kd, "live")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(kd, "guard"), filepath.Join(kd, "live")); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := s.output("run", "--key", "job", "-n", "--", "touch", "ran")
	if code != 125 || !strings.Contains(stderr, filepath.Join(kd, "live")) || !strings.Contains(stderr, "hard link") {
		t.Errorf("run on live linked to the guard: exit %d, want 125 naming %s as a hard link of the guard\n%s", code, filepath.Join(kd, "live"), stderr)
	}
	if _, err := os.Stat(s.path("ran")); err == nil {
		t.Errorf("the command started on corrupt state")
	}
	if code := s.run("release", "release", "job", "--force"); code != 0 {
		t.Fatalf("release --force: exit %d", code)
	}
	if b, _ := os.ReadFile(s.path("release.log")); !strings.Contains(string(b), "second name") {
		t.Errorf("release --force did not say it cleared the link:\n%s", b)
	}
	if code := s.run("after", "run", "--key", "job", "-n", "--", "touch", "ran"); code != 0 {
		t.Errorf("run after release --force: exit %d, want 0", code)
	}
	if _, err := os.Stat(s.path("ran")); err != nil {
		t.Errorf("the command did not run after release --force: %v", err)
	}
}

// The same for a waiter's own queue entry: with live made a second name of
// it while the waiter waits (which also loses the holder its fence: its
// live was replaced), the waiter, woken, finds live locked by its own
// entry, and fails as on corrupt state naming both (125) instead of
// waiting on itself for good; its command never starts, and once it has
// gone the key is taken as before.
func TestLiveLinkedToAWaitersEntryIsCorrupt(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--", "sleep", "1000"))
	s.waitHeld("job")
	waiter := s.start(s.fencerun("waiter", "run", "--key", "job", "--name", "waiter", "--", "touch", "ran"))
	s.waitQueue("job", "waiter")

	kd := filepath.Join(s.state, "keys", "k-job")
	entries, err := os.ReadDir(filepath.Join(kd, "queue"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("queue of job: %v, %v; want the waiter's entry alone", entries, err)
	}
	entry := filepath.Join(kd, "queue", entries[0].Name())
	if err := os.Link(entry, filepath.Join(kd, "live.new")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(kd, "live.new"), filepath.Join(kd, "live")); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder whose live was replaced: exit %d, want 76", code)
	}
	if code := exitOf(t, waiter); code != 125 {
		t.Errorf("waiter finding live linked to its own queue entry: exit %d, want 125", code)
	}
	s.logSays("waiter", "this waiter's queue entry "+entry)
	if _, err := os.Stat(s.path("ran")); err == nil {
		t.Errorf("the waiter's command started on corrupt state")
	}
	if code := s.run("after", "run", "--key", "job", "-n", "--", "touch", "ran"); code != 0 {
		t.Errorf("run once the waiter has gone: exit %d, want 0", code)
	}
}
