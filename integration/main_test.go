// Package integration tests the built fencerun binary end to end: testscript
// scripts under testdata/ for the command-line contract, and Go tests with
// real processes and signals for what scripts cannot express (SIGKILL and
// SIGSTOP of a wrapper, process trees, terminals).
package integration

import (
	"bufio"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fencerun/fencerun/internal/testsupport"
)

// bin is the fencerun binary built once for the package.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencerun-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "fencerun")
	// Both binaries, side by side as installed: fencerun execs
	// fencerun-etcd for --etcd. Static, as README's install and just
	// build make them: the work of one run is counted (runwork_test.go).
	for _, b := range [][]string{{"-o", bin, "../cmd/fencerun"}, {"-o", filepath.Join(dir, "fencerun-etcd"), "../cmd/fencerun-etcd"}} {
		build := exec.Command("go", append([]string{"build"}, b...)...)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", b[len(b)-2], err)
			os.Exit(2)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// guard bounds every wait in these tests. It is a failure guard only:
// nothing waits for it to pass.
const guard = testsupport.Guard

// The waits and liveness checks of internal/testsupport, under the short
// names these tests use.
var (
	waitFor  = testsupport.Poll
	alive    = testsupport.Alive
	waitGone = testsupport.WaitGone
)

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata",
		Setup: func(e *testscript.Env) error {
			e.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+e.Getenv("PATH"))
			e.Setenv("FENCERUN_DIR", filepath.Join(e.WorkDir, "state"))
			e.Setenv("HOME", e.WorkDir)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// waitfile FILE: wait until FILE exists (a readiness file).
			"waitfile": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: waitfile FILE")
				}
				if err := waitFor(func() bool { _, err := os.Stat(ts.MkAbs(args[0])); return err == nil }); err != nil {
					ts.Fatalf("%s never appeared", args[0])
				}
			},
			// waitgrep FILE REGEXP: wait until FILE has a line matching REGEXP.
			"waitgrep": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: waitgrep FILE REGEXP")
				}
				re := regexp.MustCompile(args[1])
				if err := waitFor(func() bool { b, _ := os.ReadFile(ts.MkAbs(args[0])); return re.Match(b) }); err != nil {
					ts.Fatalf("%s never matched %q", args[0], args[1])
				}
			},
			// gone PIDFILE...: every pid listed in the files is gone.
			"gone": func(ts *testscript.TestScript, neg bool, args []string) {
				for _, f := range args {
					for _, pid := range readPids(ts.MkAbs(f)) {
						if alive(pid) {
							ts.Fatalf("pid %d from %s is still alive", pid, f)
						}
					}
				}
			},
		},
	})
}

// fencerun returns a command running the built binary with state under
// dir.
func fencerun(dir string, args ...string) *exec.Cmd {
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), "FENCERUN_DIR="+dir, "FENCERUN_LOG_LEVEL=debug")
	return c
}

// waitFile waits until path exists and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	if err := waitFor(func() bool { _, err := os.Stat(path); return err == nil }); err != nil {
		t.Fatalf("%s never appeared", path)
	}
	b, _ := os.ReadFile(path)
	return string(b)
}

// readPids reads whitespace-separated pids from a file.
func readPids(path string) []int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		if n, err := strconv.Atoi(sc.Text()); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// endRun ends a process the test leaves running as a user would, with
// SIGTERM (and SIGCONT, should it be stopped): a fencerun then stops its
// command's tree and removes the command's cgroup before it exits. A
// SIGKILL leaves that cgroup to the key's next holder, which a finished
// test never runs. What is still alive after the guard is SIGKILLed. The
// caller may Wait after it; a process already waited for is left alone.
func endRun(p *os.Process) {
	if p == nil || p.Signal(syscall.SIGTERM) != nil {
		return // never started, or waited for
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = waitFor(func() bool { return !alive(p.Pid) })
	_ = p.Kill()
}

// exitOf waits for a started command and returns its exit code.
func exitOf(t *testing.T, c *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return testsupport.ExitCode(t, err)
	case <-time.After(guard):
		_ = c.Process.Kill()
		t.Fatalf("%v did not exit within %v", c.Args, guard)
	}
	return -1
}
