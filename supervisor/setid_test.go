package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A set-id command starts through the trampoline with the death watcher's
// pipe as one more descriptor (execVia): under the same limit it must
// start as any other command does, not fail as one that cannot be
// executed (126) for want of a number to move the pipe to (as
// TestInheritedDescriptorAboveTheLimit, which a plain command passes).
func TestSetIDCommandDescriptorNearTheLimit(t *testing.T) {
	setgid := setgidCopy(t, "setgid-true", nil)
	out, err := helperRun(t, `exec 58>/dev/null; ulimit -n 61; exec "$0" run "$1"`, setgid)
	if err != nil {
		t.Errorf("run of a set-group-ID command with descriptor 58 open under ulimit -n 61: %v, %q; want it started", err, out)
	}
}

// B3: a set-id command that execve refuses once it was found (here a
// script whose interpreter is missing: ENOENT) exits 126 as the same
// command without its set-group-ID bit does, not 127 (not found), though
// the trampoline, not this process, sees the failure.
func TestSetIDCommandExecFailureCode(t *testing.T) {
	script := []byte("#!/nonexistent/interpreter\n")
	for _, setid := range []bool{false, true} {
		var path string
		if setid {
			path = setgidCopy(t, "setgid-script", script)
		} else {
			path = filepath.Join(t.TempDir(), "script")
			if err := os.WriteFile(path, script, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		out, err := helperRun(t, `exec "$0" run "$1"`, path)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 126 {
			t.Errorf("set-id %v: run of a script whose interpreter is missing: %v, %q; want exit 126", setid, err, out)
		}
	}
}

// helperRun runs script in bash with this test binary as $0 and arg as
// $1, the binary acting as the helper (helper_test.go).
func helperRun(t *testing.T, script, arg string) ([]byte, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", script, self, arg)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	return cmd.CombinedOutput()
}

// setgidCopy is a program named name, set-group-ID to nogroup, so that
// its exec changes the credentials of a process of root's: content, or
// a copy of /bin/true when nil.
func setgidCopy(t *testing.T, name string, content []byte) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a set-group-ID program")
	}
	if content == nil {
		b, err := os.ReadFile("/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		content = b
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, content, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 0, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o755|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if !changesCredentials(path) {
		t.Fatalf("%s: its exec would not change credentials", path)
	}
	return path
}

// changesCredentials follows a script's "#!" to its interpreter as the
// kernel does: the credentials come from the program finally run.
func TestChangesCredentialsThroughInterpreters(t *testing.T) {
	setgid := setgidCopy(t, "setgid-true", nil)
	dir := t.TempDir()
	script := func(name, line string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(line+"\necho hi\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one := script("one", "#!"+setgid+" -x")
	two := script("two", "#! \t"+one)
	for _, tc := range []struct {
		path string
		want bool
	}{
		{setgid, true},
		{one, true},
		{two, true},
		{script("plain", "#!/bin/sh"), false},
		{script("none", "echo"), false},
		{script("gone", "#!/nonexistent/interpreter"), false},
		{script("loop", "#!"+filepath.Join(dir, "loop")), false},
		{"/bin/true", false},
		{dir, false},
	} {
		if got := changesCredentials(tc.path); got != tc.want {
			t.Errorf("changesCredentials(%s) = %v, want %v", filepath.Base(tc.path), got, tc.want)
		}
	}
}
