// Package testsupport is what the tests of several packages share, kept
// once: the failure guard that bounds every wait, waits on channels and on
// conditions, process liveness read from /proc, and helper processes that
// re-execute the test binary. It is imported by tests only.
//
// It does not make a test's timing safe by itself: a wait here is a
// failure guard, never a pause that a passing test sits out. Tests wait
// for a message, a file or a process state, and Guard only bounds how long
// a broken build takes to say so.
package testsupport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Guard bounds every wait in the tests. No test waits it out when things
// work.
const Guard = 30 * time.Second

// Recv receives from c, failing the test after Guard.
func Recv[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	return RecvWithin(t, c, Guard, what)
}

// RecvWithin receives from c, failing the test after within: for the
// bounds the contract states (a revocation seen within a second), with
// the margin the test gives them.
func RecvWithin[T any](t testing.TB, c <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(within):
		t.Fatalf("timed out after %v waiting for %s", within, what)
		panic("unreachable")
	}
}

// Poll checks cond until it holds, and fails after Guard. Polling is for
// tests that watch the system from outside (another process's state), where
// there is nothing to be told by.
func Poll(cond func() bool) error {
	deadline := time.Now().Add(Guard)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %v", Guard)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// WaitFor is Poll that fails the test, saying what it waited for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := Poll(cond); err != nil {
		t.Fatalf("timed out after %v waiting for %s", Guard, what)
	}
}

// Alive reports whether pid exists and is not a zombie, from
// /proc/PID/stat (the machine's pid 1 may not reap, so a dead process can
// linger as a zombie; kill -0 would call it alive).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// WaitGone waits until no pid of pids is Alive.
func WaitGone(t testing.TB, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if err := Poll(func() bool { return !Alive(pid) }); err != nil {
			t.Fatalf("pid %d still alive after %v", pid, Guard)
		}
	}
}

// Helper is a helper process: the test binary run again, running no test
// (-test.run=^$), with env added to the test's own environment; its
// TestMain sees the variables and plays the part they name. It says what
// happens on stdout, one line at a time. The test's cleanup kills it.
type Helper struct {
	t     testing.TB
	Cmd   *exec.Cmd
	Stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// StartHelper starts a helper process with env.
func StartHelper(t testing.TB, env ...string) *Helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	if os.Getenv("GORACE") == "" {
		// Under -race a process lingers a second at exit by default.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
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
	h := &Helper{t: t, Cmd: cmd, Stdin: stdin, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		h.err = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-h.done
	})
	return h
}

// Pid is the helper's pid.
func (h *Helper) Pid() int { return h.Cmd.Process.Pid }

// Next is the helper's next line, or "" once it closed its stdout.
func (h *Helper) Next() string {
	h.t.Helper()
	select {
	case line := <-h.lines:
		return line
	case <-time.After(Guard):
		h.t.Fatalf("helper %d said nothing within %v", h.Pid(), Guard)
	}
	return ""
}

// Said returns a line the helper has already said, if any, without
// waiting; a helper that closed its stdout counts as having said "".
func (h *Helper) Said() (string, bool) {
	select {
	case line := <-h.lines:
		return line, true
	default:
		return "", false
	}
}

// Expect waits for the helper's next line, checks that it starts with
// prefix, and returns the rest.
func (h *Helper) Expect(prefix string) string {
	h.t.Helper()
	return h.ExpectWithin(prefix, Guard)
}

// ExpectWithin is Expect, failing the test after within.
func (h *Helper) ExpectWithin(prefix string, within time.Duration) string {
	h.t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			<-h.done
			h.t.Fatalf("helper %d exited (%v) before saying %q", h.Pid(), h.err, prefix)
		}
		rest, found := strings.CutPrefix(line, prefix)
		if !found {
			h.t.Fatalf("helper %d said %q, want %q...", h.Pid(), line, prefix)
		}
		return strings.TrimSpace(rest)
	case <-time.After(within):
		h.t.Fatalf("helper %d did not say %q within %v", h.Pid(), prefix, within)
	}
	return ""
}

// Kill SIGKILLs the helper and waits until it is gone.
func (h *Helper) Kill() {
	h.t.Helper()
	h.Cmd.Process.Kill()
	h.Wait()
}

// Wait waits for the helper to exit and returns what exec's Wait said.
func (h *Helper) Wait() error {
	h.t.Helper()
	select {
	case <-h.done:
		return h.err
	case <-time.After(Guard):
		h.t.Fatalf("helper %d did not exit within %v", h.Pid(), Guard)
	}
	return nil
}

// ExitCode waits for the helper to exit and returns its code as a shell
// reports it: the status, or 128+N for death by signal N.
func (h *Helper) ExitCode() int {
	h.t.Helper()
	return ExitCode(h.t, h.Wait())
}

// ExitCode is the code of exec's Wait error as a shell reports it: 0, the
// status, or 128+N for death by signal N. Any other error fails the test.
func ExitCode(t testing.TB, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// KilledBy reports whether err (of exec's Wait) is the exit of a process
// killed by sig.
func KilledBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
