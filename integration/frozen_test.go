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
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device and freeze it")
	}
	for _, tool := range []string{"mkfs.ext4", "fsfreeze", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: %v", tool, err)
		}
	}
	s := newSandbox(t)
	img, mnt := s.path("fs.img"), s.path("mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img, "8M").CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a loop device here: %v: %s", err, out)
	}
	var thawOnce sync.Once
	thaw := func() {
		thawOnce.Do(func() {
			if out, err := exec.Command("fsfreeze", "-u", mnt).CombinedOutput(); err != nil {
				t.Errorf("fsfreeze -u: %v: %s", err, out)
			}
		})
	}
	// Cleanups run last-in first-out: thaw before the unmount, and both
	// before the sandbox's own cleanup (registered first) kills what is left.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-d", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	frozen := false
	t.Cleanup(func() {
		if frozen {
			thaw()
		}
	})
	s.state = filepath.Join(mnt, "state")

	// The tree ignores the stop signal and the grace is far longer than the
	// TTL: only the SIGKILL at the keeper's StopBy ends it in time.
	holder := s.start(s.fencerun("holder", "run", "--key", "frz", "--ttl", "3s", "--grace", "10m",
		"--", "sh", "-c", "trap '' TERM; "+treeOfSleeps))
	pids := s.pids("pids")
	s.waitHeld("frz")
	expires := leaseExpiry(s.state, "frz")

	if out, err := exec.Command("fsfreeze", "-f", mnt).CombinedOutput(); err != nil {
		t.Fatalf("fsfreeze -f: %v: %s", err, out)
	}
	frozen = true
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
