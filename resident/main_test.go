package resident

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// guard bounds every wait in these tests; it is a failure guard, never a
// synchronisation.
const guard = testsupport.Guard

// TestMain doubles as a holder process when re-executed with
// RESIDENT_HELPER set: it takes the role of $RESIDENT_STORE, prints
// "held PID FENCE", then either holds until its stdin closes (mode "hold")
// or also acts as its own keeper (mode "keeper"): on a handover request it
// prints "handover", releases and exits 77, as fencerun would.
func TestMain(m *testing.M) {
	if mode := os.Getenv("RESIDENT_HELPER"); mode != "" {
		os.Exit(helperMain(mode))
	}
	dir, err := os.MkdirTemp("", "resident-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	progDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func helperMain(mode string) int {
	if mode == "reserve" {
		return reserveAndDie()
	}
	var b store.Build
	if p := os.Getenv("RESIDENT_BUILD"); p != "" {
		var err error
		if b, err = BuildOf(p); err != nil {
			fmt.Println("error", err)
			return 125
		}
		b.Path = deployedAt
	}
	role, ref, err := Acquire(context.Background(), os.Getenv("RESIDENT_STORE"), Claim{
		Claim: store.Claim{Name: "helper", Marker: os.Getenv("RESIDENT_MARKER"), TTL: time.Minute},
		Build: b,
	})
	switch {
	case err != nil:
		fmt.Println("error", err)
		return 125
	case ref != nil:
		fmt.Println("refused", ref)
		return 75
	}
	fmt.Printf("held %d %d\n", os.Getpid(), role.Fence())
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	for {
		select {
		case <-eof:
			role.Release(context.Background())
			return 0
		case <-role.Changes():
			if mode != "keeper" {
				continue
			}
			req, err := role.Check(context.Background())
			if errors.Is(err, store.ErrLost) {
				fmt.Println("lost")
				return 76
			}
			if req == store.RequestHandover {
				fmt.Println("handover")
				role.Release(context.Background())
				return 77
			}
		}
	}
}

// reserveAndDie takes the role's next token as a holder does and dies by
// SIGKILL before any payload announces it: "reserved FENCE".
func reserveAndDie() int {
	p, err := pathsOf(os.Getenv("RESIDENT_STORE"))
	if err != nil {
		fmt.Println("error", err)
		return 125
	}
	fence, err := nextFence(p, 0, false)
	if err != nil {
		fmt.Println("error", err)
		return 125
	}
	fmt.Println("reserved", fence)
	unix.Kill(os.Getpid(), unix.SIGKILL)
	select {} // SIGKILL cannot be caught
}

// startReserver starts a helper that reserves the next token of the role
// of storePath and is killed before it uses it (reserveAndDie).
func startReserver(t *testing.T, storePath string) *testsupport.Helper {
	t.Helper()
	return testsupport.StartHelper(t, "RESIDENT_HELPER=reserve", "RESIDENT_STORE="+storePath)
}

// holderProc is a helper process holding a role.
type holderProc struct {
	*testsupport.Helper
	pid   int
	fence uint64
}

// startHolder starts a helper holding the role of storePath, built as the
// executable at build (or unstamped when ""), and returns once it holds it.
func startHolder(t *testing.T, mode, storePath, build, marker string) *holderProc {
	t.Helper()
	h := &holderProc{Helper: testsupport.StartHelper(t, "RESIDENT_HELPER="+mode, "RESIDENT_STORE="+storePath,
		"RESIDENT_BUILD="+build, "RESIDENT_MARKER="+marker)}
	line := h.Next()
	if _, err := fmt.Sscanf(line, "held %d %d", &h.pid, &h.fence); err != nil {
		t.Fatalf("helper: %q", line)
	}
	if h.pid != h.Pid() {
		t.Fatalf("helper says pid %d, started as %d", h.pid, h.Pid())
	}
	return h
}

// exit closes the helper's stdin (so a holder releases) and returns its
// exit code.
func (h *holderProc) exit() int {
	h.Stdin.Close()
	return h.ExitCode()
}

// progDir holds the small Go programs built for the build-identity tests.
var (
	progDir  string
	progOnce sync.Once
	progErr  error
)

// progs returns three builds of one small Go program: older, mid and newer,
// their mtimes a second apart (set with Chtimes rather than waited for).
func progs(t *testing.T) (older, mid, newer string) {
	t.Helper()
	older, mid, newer = filepath.Join(progDir, "older"), filepath.Join(progDir, "mid"), filepath.Join(progDir, "newer")
	progOnce.Do(func() {
		src := filepath.Join(progDir, "src")
		if progErr = os.MkdirAll(src, 0o700); progErr != nil {
			return
		}
		os.WriteFile(filepath.Join(src, "go.mod"), []byte("module prog\n\ngo 1.22\n"), 0o600)
		os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() { println(\"prog\") }\n"), 0o600)
		cmd := exec.Command("go", "build", "-o", mid, ".")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			progErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		data, err := os.ReadFile(mid)
		if err != nil {
			progErr = err
			return
		}
		fi, _ := os.Stat(mid)
		for p, d := range map[string]time.Duration{older: -time.Second, newer: time.Second} {
			if progErr = os.WriteFile(p, data, 0o700); progErr != nil {
				return
			}
			if progErr = os.Chtimes(p, fi.ModTime(), fi.ModTime().Add(d)); progErr != nil {
				return
			}
		}
	})
	if progErr != nil {
		t.Fatal(progErr)
	}
	return older, mid, newer
}

// deployedAt is where the test programs stand for three deploys of one
// program: only builds of one path compare (R4).
const deployedAt = "/opt/app/worker"

// buildOf is the build of one of the test programs, as deployed at
// deployedAt.
func buildOf(t *testing.T, path string) store.Build {
	t.Helper()
	b, err := BuildOf(path)
	if err != nil {
		t.Fatal(err)
	}
	b.Path = deployedAt
	return b
}

// logLines is a logger whose lines a test can wait for.
type logLines struct{ ch chan string }

func newLogLines() *logLines { return &logLines{ch: make(chan string, 256)} }

func (l *logLines) Write(p []byte) (int, error) {
	select {
	case l.ch <- string(p):
	default:
	}
	return len(p), nil
}

func (l *logLines) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: l, Level: hclog.Debug})
}

// waitFor returns once a line containing s was logged.
func (l *logLines) waitFor(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(guard)
	for {
		select {
		case line := <-l.ch:
			if strings.Contains(line, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no log line with %q", s)
		}
	}
}

func mustAcquire(t *testing.T, storePath string, c Claim) *Role {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	r, ref, err := Acquire(ctx, storePath, c)
	if err != nil {
		t.Fatal(err)
	}
	if ref != nil {
		t.Fatalf("refused: %v", ref)
	}
	t.Cleanup(func() { r.Release(context.Background()) })
	return r
}

func mustStatus(t *testing.T, storePath string) *store.Status {
	t.Helper()
	st, err := Status(storePath)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
