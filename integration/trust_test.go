package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// needRoot skips a test that needs root (other users, network namespaces),
// saying so.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates users and groups, or enters a network namespace")
	}
}

// S5: a revocation from another network namespace (a container or a
// PrivateNetwork= unit sharing the state directory) is noticed within a
// second, not at the next renewal. The TTL is 30s, so a holder that only
// noticed at its renewal would take 10s; the bound asserted (3s) is the
// the contract's second with margin for a loaded machine, as the issue demands.
func TestRevokeFromAnotherNetworkNamespace(t *testing.T) {
	needRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	if out, err := exec.Command(unshare, "-n", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare -n does not work here: %v: %s", err, out)
	}
	t.Parallel()
	s := newSandbox(t)
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", "30s", "--", "sh", "-c", treeOfSleeps))
	pids := s.pids("pids")
	s.waitHeld("job")

	release := exec.Command(unshare, "-n", bin, "release", "job", "--force")
	release.Env = append(os.Environ(), "FENCERUN_DIR="+s.state)
	s.prepare(release, "release")
	released := time.Now()
	if code := exitOf(t, s.start(release)); code != 0 {
		t.Fatalf("release --force in another network namespace: exit %d", code)
	}
	took := waitGoneTimed(t, released, pids...)
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder: exit %d, want 76", code)
	}
	t.Logf("tree dead %v after a release --force from another network namespace", took)
	if took > 3*time.Second {
		t.Errorf("the holder took %v to notice a revocation from another network namespace; S5 says within a second", took)
	}
}

// testUser is a user (with a group of its own) created for one test and
// deleted after it.
type testUser struct {
	name     string
	uid, gid int
}

// addUser creates a user named frt… (for issue 9's tests) in the given
// extra groups, and lets it run the built binary.
func addUser(t *testing.T, groups ...string) testUser {
	t.Helper()
	needRoot(t)
	name := "frt" + randomHex(t, 5)
	args := []string{"-M", "-U", "-s", "/bin/sh"}
	if len(groups) > 0 {
		args = append(args, "-G", strings.Join(groups, ","))
	}
	if out, err := exec.Command("useradd", append(args, name)...).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	shareBinary(t)
	return testUser{name: name, uid: uid, gid: gid}
}

// addGroup creates a group named frt… for one test.
func addGroup(t *testing.T) (string, int) {
	t.Helper()
	needRoot(t)
	name := "frt" + randomHex(t, 5)
	if out, err := exec.Command("groupadd", name).CombinedOutput(); err != nil {
		t.Fatalf("groupadd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("groupdel", name).Run() })
	g, err := user.LookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	return name, gid
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

var shareOnce sync.Once

// shareBinary lets other users run the built binary: its directory is
// made traversable (it holds nothing else).
func shareBinary(t *testing.T) {
	shareOnce.Do(func() {
		if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
	})
}

// as makes c run as u, with u's groups.
func (u testUser) as(c *exec.Cmd) *exec.Cmd {
	gu, _ := user.LookupId(strconv.Itoa(u.uid))
	var groups []uint32
	if gids, err := gu.GroupIds(); err == nil {
		for _, g := range gids {
			n, _ := strconv.Atoi(g)
			groups = append(groups, uint32(n))
		}
	}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: groups}}
	return c
}

// flooder connects to a unix socket address as often as it can for a few
// seconds, keeping every connection it gets open and idle, and prints how
// many it got (at most 200) and the last error. It takes both path and "@abstract" forms.
const flooder = `
import socket, sys, time
addr = sys.argv[1]
if addr.startswith("@"):
    addr = "\0" + addr[1:]
held, err = [], ""
end = time.time() + float(sys.argv[2])
while time.time() < end:
    if len(held) >= 200:
        time.sleep(0.01)
        continue
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(addr)
        held.append(s)
    except OSError as e:
        err = e.strerror
        s.close()
        time.sleep(0.01)
print("connected %d last error %s" % (len(held), err), flush=True)
`

// S9: another local user cannot reach the tick socket at all, so a flood
// of idle connections from it does not make a ticking worker look stuck
// (before: about 16 idle connections made the holder drop its command's
// ticks, and the worker was stopped as stuck, 78).
func TestTickFloodFromAnotherUser(t *testing.T) {
	stranger := addUser(t)
	t.Parallel()
	s := newSandbox(t)
	script := `echo "$FENCERUN_TICK" > addr.tmp && mv addr.tmp addr; i=0; while [ $i -lt 30 ]; do fencerun tick || exit 9; sleep 0.1; i=$((i+1)); done`
	worker := s.start(s.fencerun("worker", "run", "--key", "w", "--stuck-after", "1s", "--", "sh", "-c", script))
	addr := strings.TrimSpace(waitFile(t, s.path("addr")))

	flood := stranger.as(exec.Command("/usr/bin/python3", "-c", flooder, addr, "3"))
	out, err := flood.CombinedOutput()
	if err != nil {
		t.Fatalf("flooder: %v: %s", err, out)
	}
	t.Logf("flooder as uid %d: %s", stranger.uid, strings.TrimSpace(string(out)))
	if !strings.HasPrefix(string(out), "connected 0 ") {
		t.Errorf("another user connected to the tick socket: %s", out)
	}
	if code := exitOf(t, worker); code != 0 {
		t.Errorf("ticking worker: exit %d under a flood from another user, want 0 (78: stopped as stuck; 9: a tick failed)", code)
	}
	if b, _ := os.ReadFile(s.path("worker.log")); strings.Count(string(b), "tick refused") > 5 {
		t.Errorf("the flood reached the holder's log:\n%s", b)
	}
}

// groupStoreAndWorkDir makes a group store of group (fencerun init
// --group) and a directory every user may work in, both under a sharedDir.
func groupStoreAndWorkDir(t *testing.T, group string) (storeDir, work string) {
	t.Helper()
	base := sharedDir(t)
	storeDir = filepath.Join(base, "store")
	if code, out := runAs(t, nil, base, "init", "--group", group, storeDir); code != 0 {
		t.Fatalf("init: exit %d: %s", code, out)
	}
	work = filepath.Join(base, "w")
	os.Mkdir(work, 0o777)
	os.Chmod(work, 0o777)
	return storeDir, work
}

// sharedDir is a directory for a test with several users: root's, 0755,
// in /tmp, removed after the test.
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "frt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// runAs runs fencerun as u (nil: as root) under umask 077 in dir, and
// returns its exit code and output.
func runAs(t *testing.T, u *testUser, dir string, args ...string) (int, string) {
	t.Helper()
	c := exec.Command("/bin/sh", append([]string{"-c", `umask 077; exec "$@"`, "sh", bin}, args...)...)
	c.Dir = dir
	c.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	if u != nil {
		u.as(c)
	}
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return code, string(out)
}

// S9: a group store made by `fencerun init --group G` is shared by the
// members of G and root: their runs of one key exclude each other (checked
// with a lock the commands hold, and by unique fences), files and
// directories get the store's modes whatever the umask, and a user outside
// G is refused (125).
func TestGroupStoreSharedByMembersAndRoot(t *testing.T) {
	group, gid := addGroup(t)
	alice, bob, mallory := addUser(t, group), addUser(t, group), addUser(t)
	t.Parallel()
	base := sharedDir(t)
	storeDir := filepath.Join(base, "store")
	if code, out := runAs(t, nil, base, "init", "--group", group, storeDir); code != 0 {
		t.Fatalf("init: exit %d: %s", code, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(storeDir, &st); err != nil || st.Mode&0o7777 != 0o2770 || int(st.Gid) != gid {
		t.Fatalf("init made %s mode %#o group %d (%v), want 2770 group %d", storeDir, st.Mode&0o7777, st.Gid, err, gid)
	}
	excl := filepath.Join(base, "excl")
	os.WriteFile(excl, nil, 0o666)
	os.Chmod(excl, 0o666)
	fences := filepath.Join(base, "fences")
	os.WriteFile(fences, nil, 0o666)
	os.Chmod(fences, 0o666)
	// Each command holds flock(1) on excl without waiting: a second one at
	// once would fail to get it and say so.
	cmd := `flock -n ` + excl + ` sh -c 'echo "$FENCERUN_FENCE $(id -u)" >> ` + fences + `; sleep 0.2' || echo overlap >> ` + fences

	var wg sync.WaitGroup
	runners := []*testUser{nil, &alice, &bob}
	for _, u := range runners {
		wg.Go(func() {
			for range 3 {
				if code, out := runAs(t, u, base, "--dir", storeDir, "run", "--key", "shared", "--", "sh", "-c", cmd); code != 0 {
					t.Errorf("run as %v: exit %d: %s", u, code, out)
				}
			}
		})
	}
	wg.Wait()
	b, _ := os.ReadFile(fences)
	lines := strings.Fields(strings.ReplaceAll(string(b), "\n", " | "))
	text := string(b)
	if strings.Contains(text, "overlap") {
		t.Fatalf("two runs of one key overlapped:\n%s", text)
	}
	seen, uids := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || seen[f[0]] {
			t.Fatalf("fences not unique:\n%s", text)
		}
		seen[f[0]], uids[f[1]] = true, true
	}
	if len(seen) != 9 || len(uids) != 3 {
		t.Fatalf("want 9 runs by 3 users, got %d by %d:\n%s (%v)", len(seen), len(uids), text, lines)
	}
	filepath.Walk(storeDir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		var st syscall.Stat_t
		syscall.Lstat(path, &st)
		want := uint32(0o660)
		if fi.IsDir() {
			want = 0o2770
		}
		if fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
		if st.Mode&0o7777 != want || int(st.Gid) != gid {
			t.Errorf("%s: mode %#o group %d, want %#o group %d", path, st.Mode&0o7777, st.Gid, want, gid)
		}
		return nil
	})

	// A user outside the group is refused, and it names why.
	for _, args := range [][]string{{"status", "shared"}, {"run", "--key", "shared", "--", "true"}, {"list"}} {
		code, out := runAs(t, &mallory, base, append([]string{"--dir", storeDir}, args...)...)
		if code != 125 || !strings.Contains(out, "group store of "+group) || !strings.Contains(out, "not a member") {
			t.Errorf("%v as a stranger: exit %d: %s", args, code, out)
		}
	}
	// A member sees what another member holds.
	if code, out := runAs(t, &bob, base, "--dir", storeDir, "status", "shared"); code != 0 || !strings.Contains(out, "state: free") {
		t.Errorf("status as a member: exit %d: %s", code, out)
	}
}

// S9: a state root below a directory another user can write is refused
// (before: that user renamed root's state root away, root's next run
// recreated it and took fence 1 beside the running fence-2 holder). A
// sticky directory is fine when our entry in it is ours or root's.
func TestStateRootWithAnUnsafeAncestorIsRefused(t *testing.T) {
	mallory := addUser(t)
	t.Parallel()
	base := sharedDir(t)
	owned := filepath.Join(base, "mallorys")
	os.Mkdir(owned, 0o755)
	os.Chown(owned, mallory.uid, mallory.gid)
	writable := filepath.Join(base, "writable")
	os.Mkdir(writable, 0o777)
	os.Chmod(writable, 0o777)
	sticky := filepath.Join(base, "sticky")
	os.Mkdir(sticky, 0o777)
	syscall.Chmod(sticky, 0o1777)
	hers := filepath.Join(sticky, "hers")
	os.Mkdir(hers, 0o755)
	os.Chown(hers, mallory.uid, mallory.gid)

	for _, dir := range []string{filepath.Join(owned, "state"), filepath.Join(writable, "state"), filepath.Join(writable, "a", "b", "state"), filepath.Join(hers, "state")} {
		code, out := runAs(t, nil, base, "--dir", dir, "run", "--key", "k", "--", "true")
		if code != 125 || !strings.Contains(out, "another user can write") && !strings.Contains(out, "could replace it") {
			t.Errorf("--dir %s: exit %d: %s", dir, code, out)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("--dir %s was created", dir)
		}
	}
	// The attack itself, on a root whose parent mallory owns: refused
	// before anything runs, so there is nothing for her to rename away.
	if code, out := runAs(t, &mallory, base, "--dir", filepath.Join(owned, "state"), "run", "--key", "k", "--", "true"); code != 0 {
		t.Fatalf("mallory's own store below her own directory: exit %d: %s", code, out)
	}
	if code, out := runAs(t, nil, base, "--dir", filepath.Join(owned, "state"), "status", "k"); code != 125 || !strings.Contains(out, owned) {
		t.Errorf("root using a store below mallory's directory: exit %d: %s", code, out)
	}
	// In a sticky directory, a root of our own is fine (as in /tmp).
	if code, out := runAs(t, nil, base, "--dir", filepath.Join(sticky, "mine"), "run", "--key", "k", "--", "true"); code != 0 {
		t.Errorf("a root of our own in a sticky directory: exit %d: %s", code, out)
	}
}

// S9: a holder whose key directory is moved away under it loses its fence
// within a second and exits 76, and a newcomer, which finds no holder in the
// fresh key directory it makes, still does not start its command while the
// moved holder's tree lives (it waits for the holder's claim). The commands
// hold flock(1) on one file without waiting: an overlap would make the
// newcomer's flock fail.
func TestMovedKeyDirectoryNoOverlap(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	excl := s.path("excl")
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--grace", "2s", "--",
		"flock", "-n", excl, "sh", "-c", `trap "" TERM; echo $$ > pids.tmp && mv pids.tmp pids; exec sleep 1000`))
	pids := s.pids("pids")
	s.waitHeld("job")

	keyDir := filepath.Join(s.state, "keys", "k-job")
	moved := time.Now()
	if err := os.Rename(keyDir, filepath.Join(s.state, "keys", "k-old")); err != nil {
		t.Fatal(err)
	}
	second := s.start(s.fencerun("second", "run", "--key", "job", "--",
		"flock", "-n", excl, "sh", "-c", "touch second-ran"))
	took := s.lostWithoutOverlap(holder, second, pids, moved, "key directory was moved")
	t.Logf("moved holder exited %v after the move", took)
	s.logSays("holder", "was moved or deleted")
	// The newcomer says once that it waits for the moved holder, not at
	// every look at its claim (every 100 ms: some 20 times here; issue 26).
	b, _ := os.ReadFile(s.path("second.log"))
	if n := bytes.Count(b, []byte("still runs; waiting for it")); n != 1 {
		t.Errorf("the newcomer said %d times that it waits for the moved holder, want once:\n%s", n, b)
	}
}

// S9: `rm app.db.resident.lock` (a cleanup script, the worker itself)
// while a resident holds the role: the holder loses it within a second and
// exits 76, and a standby started after the rm does not start its command
// while the old one's tree lives (before: it started at once, beside the
// first resident still in its grace). The commands hold flock(1) on one
// file without waiting: an overlap would make the standby's flock fail.
func TestResidentLockUnlinkedNoOverlap(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	excl, storePath := s.path("excl"), s.path("app.db")
	holder := s.start(s.fencerun("holder", "run", "--resident", storePath, "--grace", "2s", "--",
		"flock", "-n", excl, "sh", "-c", `trap "" TERM; echo $$ > pids.tmp && mv pids.tmp pids; exec sleep 1000`))
	pids := s.pids("pids")
	if err := os.Remove(storePath + ".resident.lock"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	standby := s.start(s.fencerun("standby", "run", "--resident", storePath, "--wait", "forever", "--",
		"flock", "-n", excl, "sh", "-c", "touch second-ran"))
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("resident whose lock file was removed: exit %d, want 76", code)
	}
	took := time.Since(removed)
	waitGone(t, pids...)
	if code := exitOf(t, standby); code != 0 {
		t.Fatalf("standby: exit %d, want 0 (1: its flock found the first resident's command still running)", code)
	}
	if _, err := os.Stat(s.path("second-ran")); err != nil {
		t.Fatal("the standby's command never ran")
	}
	t.Logf("resident exited %v after its lock file was removed (2s of it the grace of a command ignoring TERM)", took)
}

// S1, S9: another local user fills the listen backlog of a resident
// holder's claim (an abstract name: anyone may connect to it, and nobody
// accepts on it) and then cannot make a newcomer start beside the holder
// whose lock file was removed. Before: with the backlog full the claim's
// holder could not be told (uid -1), it was ignored as a stranger's, and
// the standby started at once, its flock failing on the first resident's
// command still in its grace.
func TestResidentClaimBacklogFilledByAnotherUserNoOverlap(t *testing.T) {
	stranger := addUser(t)
	t.Parallel()
	s := newSandbox(t)
	excl, storePath := s.path("excl"), s.path("app.db")
	holder := s.start(s.fencerun("holder", "run", "--resident", storePath, "--grace", "2s", "--",
		"flock", "-n", excl, "sh", "-c", `trap "" TERM; echo $$ > pids.tmp && mv pids.tmp pids; exec sleep 1000`))
	pids := s.pids("pids")
	real, err := filepath.EvalSymlinks(storePath)
	if err != nil {
		real = storePath // the store file need not exist: its directory's real path then
		if d, err := filepath.EvalSymlinks(filepath.Dir(storePath)); err == nil {
			real = filepath.Join(d, filepath.Base(storePath))
		}
	}
	const fill = `
import hashlib, socket, sys
name = "\0fencerun/resident/" + hashlib.sha256(sys.argv[1].encode()).hexdigest()[:32]
n = 0
while n < 70000:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.setblocking(False)
    try:
        c.connect(name)
    except BlockingIOError:
        print("full after %d" % n)
        break
    finally:
        c.close()
    n += 1
else:
    print("never full")
`
	out, err := stranger.as(exec.Command("/usr/bin/python3", "-c", fill, real)).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "full after") {
		t.Fatalf("filling the claim's backlog as uid %d: %v: %s", stranger.uid, err, out)
	}
	t.Logf("as uid %d: %s", stranger.uid, strings.TrimSpace(string(out)))
	if err := os.Remove(storePath + ".resident.lock"); err != nil {
		t.Fatal(err)
	}
	standby := s.start(s.fencerun("standby", "run", "--resident", storePath, "--wait", "forever", "--",
		"flock", "-n", excl, "sh", "-c", "touch second-ran"))
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("resident whose lock file was removed: exit %d, want 76", code)
	}
	waitGone(t, pids...)
	if code := exitOf(t, standby); code != 0 {
		t.Fatalf("standby: exit %d, want 0 (1: its flock found the first resident's command still running)", code)
	}
	if _, err := os.Stat(s.path("second-ran")); err != nil {
		t.Fatal("the standby's command never ran")
	}
}

// S9: a next holder that cannot stop a dead holder's leftovers (another
// member's processes in a group store, without a cgroup to kill them by)
// never starts beside them: it exits 125 naming their pid and uid. One
// that left the command's group and session with setsid, whose marker
// only root can read, is refused too (issue 26, point 3: bob started
// beside it, 5/5).
func TestLeftoversOfAnotherMemberAreNotStartedBeside(t *testing.T) {
	for _, tc := range []struct{ name, leftover string }{
		{"in the group", "sleep 1000"},
		{"setsid", "setsid sleep 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) { testLeftoversOfAnotherMember(t, tc.leftover) })
	}
}

func testLeftoversOfAnotherMember(t *testing.T, leftover string) {
	group, _ := addGroup(t)
	alice, bob := addUser(t, group), addUser(t, group)
	t.Parallel()
	storeDir, work := groupStoreAndWorkDir(t, group)

	holder := alice.as(exec.Command(bin, "--dir", storeDir, "run", "--key", "k", "--cgroup", "off", "--",
		"sh", "-c", leftover+` & echo $! > pids.tmp && mv pids.tmp pids; wait`))
	holder.Dir = work
	holder.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	left := readPids(filepath.Join(work, "pids"))
	for len(left) == 0 {
		waitFile(t, filepath.Join(work, "pids"))
		left = readPids(filepath.Join(work, "pids"))
	}
	t.Cleanup(func() { syscall.Kill(left[0], syscall.SIGKILL) })
	// Without a cgroup, alice's process group is recorded just after her
	// command starts. Killed before that write, her wrapper leaves only its
	// marker, which bob cannot read in her processes' environment: he finds
	// nothing and starts (README, "Without a cgroup"). That moment is not
	// what this test is about: kill her wrapper once the group is recorded.
	waitRecordedIn(t, storeDir, "k")
	holder.Process.Kill()
	holder.Wait()

	code, out := runAs(t, &bob, work, "--dir", storeDir, "run", "--key", "k", "--cgroup", "off", "--", "touch", "bob-ran")
	if code != 125 || !strings.Contains(out, fmt.Sprintf("pid %d (uid %d)", left[0], alice.uid)) {
		t.Errorf("bob beside alice's leftover pid %d: exit %d: %s", left[0], code, out)
	}
	if _, err := os.Stat(filepath.Join(work, "bob-ran")); err == nil {
		t.Error("bob's command ran beside alice's leftovers")
	}
	if !alive(left[0]) {
		t.Errorf("alice's leftover pid %d is gone; the test did not test anything", left[0])
	}
}

// R4: only a build of the same program can take the resident role over. An
// unrelated program with a newer mtime is refused as not newer (before: a
// freshly written debug-peek script with -n stopped app-worker, which
// exited 77), and a script named by --build is the build of an interpreted
// worker, so a newer script hands over (before: the build was the
// interpreter's, and never newer).
func TestResidentIdentityIsTheProgram(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	storePath := s.path("app.db")
	write := func(name, body string, age time.Duration) string {
		p := s.path(name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		os.Chtimes(p, at, at)
		return p
	}
	worker := write("app-worker", `touch worker-ready; exec sleep 1000`, time.Hour)
	holder := s.start(s.fencerun("holder", "run", "--resident", storePath, "--", worker))
	waitFile(t, s.path("worker-ready"))
	peek := write("debug-peek", `touch peek-ran`, 0)
	if code := s.run("peek", "run", "--resident", storePath, "-n", "--", peek); code != 75 {
		t.Errorf("an unrelated newer program: exit %d, want 75", code)
	}
	if b, _ := os.ReadFile(s.path("peek.log")); !strings.Contains(string(b), "a different program") {
		t.Errorf("the refusal does not say why:\n%s", b)
	}
	if _, err := os.Stat(s.path("peek-ran")); err == nil {
		t.Error("the unrelated program ran")
	}
	if code := s.run("release", "release", "--resident", storePath, "--force"); code != 0 {
		t.Fatalf("release --resident --force: exit %d", code)
	}
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("released holder: exit %d, want 76", code)
	}

	// An interpreted worker: sh script.sh, with --build script.sh.
	script := write("worker.sh", `touch "ready-$V"; exec sleep 1000`, time.Hour)
	first := s.fencerun("first", "run", "--resident", storePath, "--build", script, "--", "sh", script)
	first.Env = append(first.Env, "V=1")
	s.start(first)
	waitFile(t, s.path("ready-1"))
	os.Chtimes(script, time.Now(), time.Now()) // the deploy of a new version
	second := s.fencerun("second", "run", "--resident", storePath, "--build", script, "--", "sh", script)
	second.Env = append(second.Env, "V=2")
	s.start(second)
	if code := exitOf(t, first); code != 77 {
		t.Errorf("the older script's holder: exit %d, want 77 (handed over)", code)
	}
	waitFile(t, s.path("ready-2"))
	if code := s.run("release2", "release", "--resident", storePath, "--force"); code != 0 {
		t.Fatalf("release --resident --force: exit %d", code)
	}
	exitOf(t, second)
}

// S9: a member of a group store writes a lease record naming a dead
// holder whose process group is some other process of the host (any
// process's group and start time can be read in /proc); root's next run of
// that key, or root's prune, must not stop it. Reproduced in review: root
// SIGTERMs and SIGKILLs the named group (a root `setsid sleep`, standing
// for sshd or any service): records in a group store are writable by every
// member, and nothing ties a recorded group or session (or a fencerun-*
// cgroup path) to the dead holder.
func TestForgedLeftoverRecordKillsNothingElse(t *testing.T) {
	group, _ := addGroup(t)
	alice := addUser(t, group)
	t.Parallel()
	storeDir, work := groupStoreAndWorkDir(t, group)
	// alice's holder dies, leaving a record of a dead holder.
	holder := alice.as(exec.Command(bin, "--dir", storeDir, "run", "--key", "k", "--cgroup", "off", "--",
		"sh", "-c", `echo $$ > pids.tmp && mv pids.tmp pids; exec sleep 1000`))
	holder.Dir = work
	holder.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(work, "pids"))
	holder.Process.Kill()
	holder.Wait()

	victim := exec.Command("sleep", "1000")
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	vpid := victim.Process.Pid
	st := procStat(vpid)
	if len(st) < 20 {
		t.Fatal("cannot read the victim's start time")
	}
	leaseFile := filepath.Join(storeDir, "keys", "k-k", "lease")
	b, err := readLeaseRecord(leaseFile) // the newer slot's JSON (record_test.go)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%s: %v", leaseFile, err)
	}
	h, _ := rec["holder"].(map[string]any)
	if h == nil {
		t.Fatalf("no dead holder in %s", b)
	}
	start, _ := strconv.ParseUint(st[19], 10, 64)
	h["group"] = map[string]any{"id": vpid, "start": start}
	delete(h, "marker")
	forged, _ := json.Marshal(rec)
	src := filepath.Join(work, "forged")
	os.WriteFile(src, forged, 0o644)
	os.Chmod(src, 0o644)
	cp := alice.as(exec.Command("sh", "-c", `cat "$1" > "$2"`, "sh", src, leaseFile))
	if out, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("alice writing the record: %v: %s", err, out)
	}

	code, out := runAs(t, nil, work, "--dir", storeDir, "run", "--key", "k", "--cgroup", "off", "--grace", "1s", "--", "true")
	t.Logf("root's run: exit %d: %s", code, out)
	if procState(vpid) == 0 || procState(vpid) == 'Z' {
		t.Errorf("root's next holder killed pid %d, a process that was never the dead holder's, named by a member's record", vpid)
	}
}

// S9: a member who cannot stop root's leftovers in a group store (root's
// command's cgroup, which the member may not kill) is told their pids and
// uid, and does not start beside them; before, the message was
// "cgroup.kill: permission denied".
func TestMemberIsToldWhoseLeftoversItCannotStop(t *testing.T) {
	group, _ := addGroup(t)
	bob := addUser(t, group)
	t.Parallel()
	storeDir, work := groupStoreAndWorkDir(t, group)
	cg := newTestCgroup(t)
	holder := exec.Command(bin, "--dir", storeDir, "run", "--key", "k", "--cgroup", "require", "--",
		"sh", "-c", `setsid sleep 1000 & echo $! > pids.tmp && mv pids.tmp pids; wait`)
	holder.Dir = work
	holder.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work}
	cg.start(t, holder)
	left := readPids(waitPidFile(t, filepath.Join(work, "pids")))
	t.Cleanup(func() { syscall.Kill(left[0], syscall.SIGKILL) })
	waitRecordedIn(t, storeDir, "k")
	holder.Process.Kill()
	holder.Wait()

	code, out := runAs(t, &bob, work, "--dir", storeDir, "run", "--key", "k", "--cgroup", "off", "--grace", "0.2s", "--", "touch", "bob-ran")
	if code != 125 || !strings.Contains(out, fmt.Sprintf("pid %d (uid 0)", left[0])) {
		t.Errorf("bob beside root's leftover pid %d: exit %d: %s", left[0], code, out)
	}
	if _, err := os.Stat(filepath.Join(work, "bob-ran")); err == nil {
		t.Error("bob's command ran beside root's leftovers")
	}
	if !alive(left[0]) {
		t.Errorf("root's leftover pid %d is gone; the test did not test anything", left[0])
	}
}
