package integration

// What the command is given besides its environment (SPEC.md): the
// descriptors the caller passed open, at their own numbers, and sockets
// under systemd socket activation; fencerun's own descriptors never.

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A descriptor the caller opened with 5> reaches the command at 5, and the
// command has nothing else open beyond what its caller had: not the state
// files, tick socket or eventfd fencerun holds meanwhile.
func TestDescriptorAtItsNumber(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	// sh execs fencerun with what this test passes it (0, 1, 2 and any
	// descriptor this test process was itself passed open, since os/exec
	// leaves those alone) and 5. The command lists its descriptors and where
	// they lead; the one its glob opened is closed by then ("gone").
	script := `exec fencerun run --key fd -- sh -c 'echo through-5 >&5; for f in /proc/$$/fd/*; do printf "fd %s " "${f##*/}"; readlink "$f" || echo gone; done' 5>five`
	if code := exitOf(t, s.start(s.shell("fd", script))); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if b, _ := os.ReadFile(s.path("five")); string(b) != "through-5\n" {
		t.Errorf("the file opened on 5 holds %q, want the command's line", b)
	}
	want := append([]int{0, 1, 2, 5}, passedHere(t)...)
	slices.Sort(want)
	var fds []int
	for _, l := range strings.Split(readLog(t, s, "fd"), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "fd" || f[2] == "gone" {
			continue
		}
		fd, _ := strconv.Atoi(f[1])
		fds = append(fds, fd)
		if fd == 5 && f[2] != s.path("five") {
			t.Errorf("fd 5 of the command leads to %s, want %s", f[2], s.path("five"))
		}
	}
	slices.Sort(fds)
	if !slices.Equal(fds, want) {
		t.Errorf("the command has fds %v open, want %v:\n%s", fds, want, readLog(t, s, "fd"))
	}
}

// passedHere are the descriptors from 3 on that this test process has open
// without close-on-exec: what its own parent passed it, which every child
// it starts inherits too.
func passedHere(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fd)
		}
	}
	return fds
}

// The caller holds a flock(1) lock on fd 9 and runs the command under
// fencerun, as flock(1)'s own tests pass a lock descriptor on: the command
// holds the same lock through fd 9 (another open of the file cannot take
// it), and can let it go, after which anyone can.
func TestLockDescriptorReachesCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1)")
	}
	s := newSandbox(t)
	script := `exec 9>lockfile; flock -n 9 || exit 90
fencerun run --key lock -- sh -c '
	flock -n -E 91 lockfile true; echo "other open: $?"
	flock -n 9; echo "fd 9: $?"
	flock -u 9
	flock -n lockfile true; echo "after unlock: $?"'`
	if code := exitOf(t, s.start(s.shell("lock", script))); code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, readLog(t, s, "lock"))
	}
	out := readLog(t, s, "lock")
	for _, want := range []string{"other open: 91", "fd 9: 0", "after unlock: 0"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("the command said no %q:\n%s", want, out)
		}
	}
}

// Under socket activation with LISTEN_PID naming fencerun, the command
// gets the listening socket at fd 3, LISTEN_FDS and LISTEN_FDNAMES, and a
// LISTEN_PID that names it; it accepts a real connection.
func TestSocketActivation(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	activated := filepath.Join(t.TempDir(), "activated")
	if out, err := exec.Command("go", "build", "-o", activated, "./internal/activated").CombinedOutput(); err != nil {
		t.Fatalf("building activated: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sock, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	// As systemd does, LISTEN_PID names the process it executes: sh execs
	// fencerun in its own process.
	c := s.shell("activated", `LISTEN_PID=$$ exec fencerun run --key sock -- "$0" web`, activated)
	c.Env = append(c.Env, "LISTEN_FDS=1", "LISTEN_FDNAMES=web")
	c.ExtraFiles = []*os.File{sock}
	s.start(c)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(guard))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer: %v\n%s", err, readLog(t, s, "activated"))
	}
	if code := exitOf(t, c); code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, readLog(t, s, "activated"))
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "hello from "))
	if err != nil || pid == c.Process.Pid {
		t.Errorf("answer %q: want the command's pid, not fencerun's %d", line, c.Process.Pid)
	}
}

// shell is sh -c script [args...] in the sandbox, its output to log.
func (s *sandbox) shell(log, script string, args ...string) *exec.Cmd {
	s.t.Helper()
	c := exec.Command("sh", append([]string{"-c", script}, args...)...)
	c.Env = append(os.Environ(), "FENCERUN_DIR="+s.state)
	s.prepare(c, log)
	return c
}

func readLog(t *testing.T, s *sandbox, log string) string {
	t.Helper()
	b, err := os.ReadFile(s.path(log + ".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// SIGHUP and SIGINT the caller ignored (nohup, an empty trap) stay ignored for
// the command, as the job-control signals do (all three ignored: fencerun
// then catches none of them); fencerun does not catch SIGHUP and SIGINT,
// so does not forward them either.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	c := s.shell("ign", `trap '' HUP INT TSTP TTIN TTOU; exec fencerun run --key ign -- grep SigIgn /proc/self/status`)
	if code := exitOf(t, s.start(c)); code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, readLog(t, s, "ign"))
	}
	var mask uint64
	for _, l := range strings.Split(readLog(t, s, "ign"), "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		if mask&(1<<(sig-1)) == 0 {
			t.Errorf("%v is not ignored by the command (SigIgn %016x)", sig, mask)
		}
	}

	// sigrec catches every signal fencerun could forward, ignored or not.
	sigrec, err := sigrecOnce()
	if err != nil {
		t.Fatal(err)
	}
	w := s.start(s.shell("rec", `trap '' HUP INT; exec fencerun run --key ign -- "$0" rec`, sigrec))
	var procs []string
	if err := waitFor(func() bool { procs = recorded(s.path("rec"), "ready"); return len(procs) == 2 }); err != nil {
		t.Fatalf("sigrec never ready: %q", procs)
	}
	// Sent one by one, and forwarded in the order they arrive: USR1
	// recorded means HUP and INT would have been by then.
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGUSR1} {
		if err := w.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitFor(func() bool { return len(recorded(s.path("rec"), "USR1")) == 2 }); err != nil {
		t.Fatalf("USR1 never reached the command")
	}
	for _, name := range []string{"HUP", "INT"} {
		if got := recorded(s.path("rec"), name); len(got) > 0 {
			t.Errorf("the ignored SIG%s was forwarded to %q", name, got)
		}
	}
	if err := w.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, w); code != 0 {
		t.Errorf("exit %d, want 0 (sigrec exits 0 on TERM)", code)
	}
}
