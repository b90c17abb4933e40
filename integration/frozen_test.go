package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A holder whose state root's file system is frozen (fsfreeze(8), as a
// snapshot or a wedged disk freezes one) cannot renew: its renewal's write
// sleeps in the kernel, uninterruptibly, until the file system thaws. The
// keeper must still give up before the lease's expiry and the tree must be
// killed by then (S3), though the write never returns; once the file system
// thaws, the holder releases and exits 76. The file system is an ext4 on a
// loop device of the test's own, thawed and unmounted at cleanup whatever
// happens.
func TestFrozenStateFileSystem(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	_, freeze, thaw := frozenState(t, s)

	// The tree ignores the stop signal and the grace is far longer than the
	// TTL: only the SIGKILL at the keeper's StopBy ends it in time.
	holder := s.start(s.fencerun("holder", "run", "--key", "frz", "--ttl", "3s", "--grace", "10m",
		"--", "sh", "-c", "trap '' TERM; "+treeOfSleeps))
	pids := s.pids("pids")
	s.waitHeld("frz")
	expires := leaseExpiry(s.state, "frz")

	freeze()
	at := time.Now()
	died := waitGoneTimed(t, at, pids...)
	// The record read before the freeze may be a renewal older than the
	// one made last before it: logged, not asserted (the keeper's own
	// clock decides).
	t.Logf("tree dead %v after the freeze; the lease record read before it expires %s", died, expiryMargin(expires, at.Add(died)))
	if st := procState(holder.Process.Pid); st == 0 || st == 'Z' {
		t.Logf("holder ended while frozen")
	}
	thaw()
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder: exit %d after a renewal hung on a frozen file system, want 76", code)
	}
	// The renewal hung rather than failed: the keeper gave up by its clock.
	if b, _ := os.ReadFile(s.path("holder.log")); !strings.Contains(string(b), "not renewed within") {
		t.Errorf("the holder's log does not say its lease was not renewed in time:\n%s", b)
	}
	if code := s.run("next", "run", "--key", "frz", "-n", "--", "true"); code != 0 {
		t.Errorf("the next run after the thaw: exit %d, want 0 (the key released)", code)
	}
}

// frozenState gives s a state root on an ext4 of its own, on a loop
// device, and says how to freeze and thaw it; cleanup thaws it (if
// frozen) and unmounts it, before the sandbox's own cleanup.
func frozenState(t *testing.T, s *sandbox) (mnt string, freeze, thaw func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device and freeze it")
	}
	for _, tool := range []string{"mkfs.ext4", "fsfreeze", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: %v", tool, err)
		}
	}
	img := s.path("fs.img")
	mnt = s.path("mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img, "8M").CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a loop device here: %v: %s", err, out)
	}
	// Cleanups run last-in first-out: thaw before the unmount, and both
	// before the sandbox's own cleanup (registered first) kills what is left.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", "-d", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	var mu sync.Mutex
	frozen := false
	thaw = func() {
		mu.Lock()
		defer mu.Unlock()
		if frozen {
			frozen = false
			if out, err := exec.Command("fsfreeze", "-u", mnt).CombinedOutput(); err != nil {
				t.Errorf("fsfreeze -u: %v: %s", err, out)
			}
		}
	}
	t.Cleanup(thaw)
	freeze = func() {
		mu.Lock()
		defer mu.Unlock()
		if out, err := exec.Command("fsfreeze", "-f", mnt).CombinedOutput(); err != nil {
			t.Fatalf("fsfreeze -f: %v: %s", err, out)
		}
		frozen = true
	}
	s.state = filepath.Join(mnt, "state")
	return mnt, freeze, thaw
}

// Ctrl-Z, the state root frozen, then fg: fencerun asks the store before
// the command may run again (S7), and the store does not answer (the
// renewal's write sleeps until the thaw). The command must not run again,
// and is killed once the lease counts as lost; fg returns 76 once the file
// system thaws and fencerun can release.
func TestJobControlFgOnAFrozenStore(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	_, freeze, thaw := frozenState(t, s)
	p := startShell(t, s)
	p.run("set -b")
	p.typ(strings.Replace(beating, "--key jc2", "--key jf --ttl 3s", 1) + "\n")
	p.waitOutput("ready")
	cmd := readPids(s.path("cmd.pid"))[0]
	beats(t, s)
	p.typ("\x1a")
	p.waitPrompt()
	if st := procState(cmd); st != 'T' {
		t.Fatalf("after Ctrl-Z the command's state is %c, want T", st)
	}
	stopped, _ := os.ReadFile(s.path("beat"))
	freeze()
	p.typ("fg; echo \"exit:$?\"\n")
	waitGone(t, cmd)
	if now, _ := os.ReadFile(s.path("beat")); string(now) != string(stopped) {
		t.Errorf("the command ran again on fg while its store did not answer: beat %q -> %q", stopped, now)
	}
	thaw()
	p.waitOutput("exit:76")
}
