package integration

import (
	"crypto/rand"
	"encoding/hex"
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
// SPEC's second with margin for a loaded machine, as the issue demands.
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
		t.Errorf("the holder took %v to notice a revocation from another network namespace; SPEC S5 says within a second", took)
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
