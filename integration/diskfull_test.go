package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// B5: a key's first write on a full disk, a read-only file system or an
// immutable key directory exits 125 naming the path and the cause, starts
// nothing and leaves no half-written file. A key written before the disk
// filled up runs: its record is written in place, in space it has. Both
// need root (a tmpfs mount, chattr +i); elsewhere the store's own tests
// cover the same failures with a file size limit.
func TestFullDiskAndUnwritableState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tiny tmpfs and set the immutable attribute")
	}
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", state).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(state, syscall.MNT_DETACH) })

	// A key that worked before the disk filled up.
	if out, err := fencerun(state, "run", "--key", "k", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("first run: %v: %s", err, out)
	}
	fill, err := os.Create(filepath.Join(state, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := fill.Write(buf); err != nil {
			break
		}
	}
	fill.Close()

	// A key written before the disk filled up has its record file already
	// (written in place since issue 13): its run needs no new space, and
	// succeeds. A key's first write needs space: 125, nothing started.
	started := filepath.Join(dir, "started")
	if out, err := fencerun(state, "run", "--key", "k", "--", "touch", started).CombinedOutput(); err != nil {
		t.Errorf("full disk, key k written before: %v, want it to run:\n%s", err, out)
	} else if _, err := os.Stat(started); err != nil {
		t.Errorf("full disk, key k written before: its command did not run: %v", err)
	}
	os.Remove(started)
	out, err := fencerun(state, "run", "--key", "fresh", "--", "touch", started).CombinedOutput()
	if code := exitCode(err); code != 125 || !strings.Contains(string(out), state) || !strings.Contains(string(out), "no space left on device") {
		t.Errorf("full disk, a key's first write: exit %d, want 125 naming %s and the cause:\n%s", code, state, out)
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("the command ran although its lease could not be written")
	}
	assertNoTemp(t, state)

	// A read-only file system: no write in place either.
	if out, err := exec.Command("mount", "-o", "remount,ro", state).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	out, err = fencerun(state, "run", "--key", "k", "--", "touch", started).CombinedOutput()
	if code := exitCode(err); code != 125 || !strings.Contains(string(out), state) || !strings.Contains(string(out), "read-only file system") {
		t.Errorf("read-only file system: exit %d, want 125 naming %s and the cause:\n%s", code, state, out)
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("the command ran although its lease could not be written")
	}
	if out, err := exec.Command("mount", "-o", "remount,rw", state).CombinedOutput(); err != nil {
		t.Fatalf("remount read-write: %v: %s", err, out)
	}

	// An immutable key directory: even root cannot write in it.
	os.Remove(filepath.Join(state, "fill"))
	kd := filepath.Join(state, "keys", "k-k")
	if out, err := exec.Command("chattr", "+i", kd).CombinedOutput(); err != nil {
		t.Skipf("chattr +i does not work here: %v: %s", err, out)
	}
	defer exec.Command("chattr", "-i", kd).Run()
	out, err = fencerun(state, "run", "--key", "k", "--", "touch", started).CombinedOutput()
	if code := exitCode(err); code != 125 || !strings.Contains(string(out), kd) || !strings.Contains(string(out), "operation not permitted") {
		t.Errorf("immutable key directory: exit %d, want 125 naming %s and the cause:\n%s", exitCode(err), kd, out)
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("the command ran although its lease could not be written")
	}
	assertNoTemp(t, state)
}

func assertNoTemp(t *testing.T, root string) {
	t.Helper()
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(info.Name(), ".tmp-") {
			t.Errorf("half-written file left behind: %s", p)
		}
		return nil
	})
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return 0
}
