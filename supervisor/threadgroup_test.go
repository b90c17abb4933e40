package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// buildC compiles testdata/NAME.c with gcc into the test's directory.
func buildC(t *testing.T, name string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command(gcc, "-O", "-pthread", "-o", bin, filepath.Join("testdata", name+".c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// liveThreads counts the threads of pid's thread group that have not
// ended (a reused pid would count too; the tests' pids are fresh).
func liveThreads(pid int) int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(dir + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && !strings.ContainsRune("ZXx", rune(s[i+2])) {
			n++
		}
	}
	return n
}

// readyPid waits for the file a helper writes its pid into when ready.
func readyPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(guard)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s was not written within %v", path, guard)
	return 0
}

// S2, S1 without a cgroup (issue 26, point 2): a thread group whose main
// thread ended with pthread_exit, while another thread runs on, reads Z
// in its leader's stat. It is one process until its last thread ends:
// stopped at the command's exit, and found among a dead holder's
// leftovers. Before, it was taken for dead and outlived both.
func TestThreadGroupWithExitedLeaderIsStopped(t *testing.T) {
	bin := buildC(t, "leaderexit")
	t.Run("command exit", func(t *testing.T) {
		e := newEnv(t)
		ready := filepath.Join(t.TempDir(), "ready")
		p := e.start(100*time.Millisecond, "sh", "-c", `setsid "$0" "$1" & while [ ! -s "$1" ]; do sleep 0.01; done`, bin, ready)
		wait(t, p)
		pid := readyPid(t, ready)
		if n := liveThreads(pid); n != 0 {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("pid %d (leader exited) has %d live threads after Wait", pid, n)
		}
	})
	t.Run("dead holder", func(t *testing.T) {
		e := newEnv(t)
		ready := filepath.Join(t.TempDir(), "ready")
		cmd := exec.Command(bin, ready)
		cmd.Env = e.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := readyPid(t, ready)
		host, _ := os.Hostname()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		n, err := stopLeftovers(ctx, store.Leftover{HolderPID: 1 << 22, Host: host, Marker: e.marker}, StopConfig{Grace: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || liveThreads(pid) != 0 {
			t.Errorf("stopLeftovers found %d; pid %d (leader exited) has %d live threads after it", n, pid, liveThreads(pid))
		}
	})
}
