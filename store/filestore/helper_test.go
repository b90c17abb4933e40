package filestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/storetest"
)

// The test binary doubles as the helper process that tests need where
// liveness is the point: it holds, waits for or writes a lease as a real
// process that a test can stop or kill.
const (
	helperMode   = "FILESTORE_TEST_HELPER" // hold, fsize or loop
	helperRoot   = "FILESTORE_TEST_ROOT"
	helperKey    = "FILESTORE_TEST_KEY"
	helperMarker = "FILESTORE_TEST_MARKER"
	helperWait   = "FILESTORE_TEST_WAIT"
	// crashHook makes the helper SIGKILL itself in its first write, right
	// before the rename, so that tests can crash a real writer between the
	// temporary file and the rename.
	crashHook = "FILESTORE_TEST_CRASH_BEFORE_RENAME"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperMode); mode != "" {
		os.Exit(runHelper(mode))
	}
	storetest.Main(m, openRoot)
}

// runHelper runs one helper mode. It says what happened on stdout, one
// line at a time: "acquired FENCE", "busy", "released", "error MESSAGE".
func runHelper(mode string) int {
	if os.Getenv(crashHook) == "1" {
		beforeRename = func() {
			unix.Kill(unix.Getpid(), unix.SIGKILL)
			select {} // SIGKILL cannot be caught; never reach the rename.
		}
	}
	s, err := Open(os.Getenv(helperRoot), Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	key := os.Getenv(helperKey)
	claim := store.Claim{Name: "helper", TTL: time.Hour, Wait: os.Getenv(helperWait) != "0", Marker: os.Getenv(helperMarker)}
	ctx := context.Background()
	switch mode {
	case "hold":
		// Acquire, say so, hold until stdin closes, release.
		l, _, err := s.Acquire(ctx, key, claim)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		if l == nil {
			fmt.Println("busy")
			return 0
		}
		fmt.Println("acquired", l.Fence())
		io.Copy(io.Discard, os.Stdin)
		if err := l.Release(ctx); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("released")
		return 0
	case "fsize":
		// Acquire with writes to files limited to one byte.
		lim := unix.Rlimit{Cur: 1, Max: 1}
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
			fmt.Println("error setrlimit", err)
			return 1
		}
		l, _, err := s.Acquire(ctx, key, claim)
		if err != nil {
			fmt.Println("error", err)
			return 0
		}
		fmt.Println("acquired", l.Fence())
		return 0
	case "loop":
		// Take the lease again and again; inside, a marker file made with
		// O_EXCL proves nobody else is inside too.
		n, _ := strconv.Atoi(os.Getenv("FILESTORE_TEST_LOOPS"))
		inside := filepath.Join(os.Getenv("FILESTORE_TEST_SCRATCH"), "inside")
		for range n {
			l, _, err := s.Acquire(ctx, key, claim)
			if err != nil {
				fmt.Println("error", err)
				return 1
			}
			f, err := os.OpenFile(inside, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				fmt.Println("error overlap:", err)
				return 1
			}
			f.Close()
			if err := os.Remove(inside); err != nil {
				fmt.Println("error", err)
				return 1
			}
			if err := l.Release(ctx); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("done")
		return 0
	}
	fmt.Println("error unknown mode", mode)
	return 2
}

// child is a helper process.
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error // of Wait, once done is closed
}

func spawn(t *testing.T, mode, root, key string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperMode+"="+mode, helperRoot+"="+root, helperKey+"="+key)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.done
	})
	return c
}

// expect waits for the child's next line and checks that it starts with
// prefix; it returns the rest.
func (c *child) expect(prefix string) string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			<-c.done
			c.t.Fatalf("helper %d exited (%v) before saying %q", c.cmd.Process.Pid, c.err, prefix)
		}
		rest, found := strings.CutPrefix(line, prefix)
		if !found {
			c.t.Fatalf("helper %d said %q, want %q...", c.cmd.Process.Pid, line, prefix)
		}
		return strings.TrimSpace(rest)
	case <-time.After(guard):
		c.t.Fatalf("helper %d did not say %q within %v", c.cmd.Process.Pid, prefix, guard)
	}
	return ""
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// kill SIGKILLs the child and waits until it is gone.
func (c *child) kill() {
	c.t.Helper()
	c.cmd.Process.Kill()
	c.wait()
}

func (c *child) wait() error {
	c.t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(guard):
		c.t.Fatalf("helper %d did not exit within %v", c.pid(), guard)
	}
	return nil
}

// killedBy reports whether err is the exit of a process killed by sig.
func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// guard bounds every wait in these tests. It is a failure guard only: no
// test waits it out when things work.
const guard = 20 * time.Second

// waitFor polls cond until it holds, failing the test after guard.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", guard, what)
		}
		time.Sleep(time.Millisecond)
	}
}
