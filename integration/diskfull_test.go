package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// B5: a full disk or an unwritable state directory exits 125 naming the
// path and the cause, starts nothing and leaves no half-written file. Both
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

	started := filepath.Join(dir, "started")
	for _, key := range []string{"k", "fresh"} {
		out, err := fencerun(state, "run", "--key", key, "--", "touch", started).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 125 || !strings.Contains(string(out), state) || !strings.Contains(string(out), "no space left on device") {
			t.Errorf("full disk, key %s: exit %d, want 125 naming %s and the cause:\n%s", key, code, state, out)
		}
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("the command ran although its lease could not be written")
	}
	assertNoTemp(t, state)

	// An immutable key directory: even root cannot write in it.
	os.Remove(filepath.Join(state, "fill"))
	kd := filepath.Join(state, "keys", "k-k")
	if out, err := exec.Command("chattr", "+i", kd).CombinedOutput(); err != nil {
		t.Skipf("chattr +i does not work here: %v: %s", err, out)
	}
	defer exec.Command("chattr", "-i", kd).Run()
	out, err := fencerun(state, "run", "--key", "k", "--", "touch", started).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 125 || !strings.Contains(string(out), kd) || !strings.Contains(string(out), "operation not permitted") {
		t.Errorf("immutable key directory: exit %d, want 125 naming %s and the cause:\n%s", code, kd, out)
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
