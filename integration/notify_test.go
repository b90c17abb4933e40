package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/internal/testsupport"
)

var notifyManagers int

// newNotifyManager binds an abstract NOTIFY_SOCKET (@...), as systemd
// gives it to user managers' units.
func newNotifyManager(t *testing.T) *notifyManager {
	t.Helper()
	notifyManagers++
	return &notifyManager{testsupport.ListenNotify(t, fmt.Sprintf("@fencerun-notify-test-%d-%d", os.Getpid(), notifyManagers))}
}

// notifyManager is testsupport's, with what these tests expect of
// fencerun's messages.
type notifyManager struct{ *testsupport.NotifyManager }

// expect reads messages until one starting with prefix, and checks that
// it and all before it came from pid: systemd's NotifyAccess=main drops
// anything else.
func (m *notifyManager) expect(t *testing.T, pid int, prefix string) string {
	t.Helper()
	for {
		s, from := m.Next(t)
		if from != pid {
			t.Fatalf("message %q came from pid %d, not from fencerun (%d)", s, from, pid)
		}
		if strings.HasPrefix(s, prefix) {
			return s
		}
	}
}

func notifyRun(dir, addr string, args ...string) *exec.Cmd {
	c := fencerun(dir, args...)
	c.Env = append(c.Env, "NOTIFY_SOCKET="+addr)
	return c
}

// With --ready start, fencerun is the unit's main process: the status
// says the lease once held, READY=1 comes once the command started, the
// command's environment has no NOTIFY_SOCKET, and a lost lease says so
// with STOPPING=1, all from fencerun's own pid (N1).
func TestNotifyReadyStartAndLost(t *testing.T) {
	dir := t.TempDir()
	m := newNotifyManager(t)
	run := notifyRun(dir, m.Addr, "run", "--key", "sd", "--", "sh", "-c", `env > "$0"/env; echo $$ > "$0"/started; exec sleep 60`, dir)
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	ready := m.expect(t, run.Process.Pid, "STATUS=holding")
	if !strings.HasPrefix(ready, "STATUS=holding sd (fence ") || !strings.HasSuffix(ready, "\nREADY=1") {
		t.Fatalf("ready message %q, want the holding status and READY=1", ready)
	}
	waitFile(t, filepath.Join(dir, "started"))
	if env := waitFile(t, filepath.Join(dir, "env")); strings.Contains(env, "NOTIFY_SOCKET") {
		t.Errorf("the command got a NOTIFY_SOCKET with --ready start:\n%s", env)
	}
	if out, err := fencerun(dir, "release", "sd", "--force").CombinedOutput(); err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	lost := m.expect(t, run.Process.Pid, "STATUS=")
	if !strings.HasPrefix(lost, "STATUS=lease lost") || !strings.HasSuffix(lost, "\nSTOPPING=1") {
		t.Fatalf("after a release --force: %q, want STATUS=lease lost ... and STOPPING=1", lost)
	}
	if code := exitOf(t, run); code != 76 {
		t.Fatalf("exit %d, want 76", code)
	}
}

// While it waits, the unit's status says for what, behind whom and at
// which position (N1).
func TestNotifyWaiting(t *testing.T) {
	dir := t.TempDir()
	holder := fencerun(dir, "run", "--key", "sdw", "--name", "first", "--", "sh", "-c", `touch "$0"; exec sleep 60`, filepath.Join(dir, "held"))
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { endRun(holder.Process); holder.Wait() }()
	waitFile(t, filepath.Join(dir, "held"))
	m := newNotifyManager(t)
	waiter := notifyRun(dir, m.Addr, "run", "--key", "sdw", "--wait", "1h", "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { endRun(waiter.Process); waiter.Wait() }()
	s := m.expect(t, waiter.Process.Pid, "STATUS=waiting")
	for _, want := range []string{"STATUS=waiting for sdw: held by first (pid ", "position 1 of 1", "left"} {
		if !strings.Contains(s, want) {
			t.Fatalf("waiting status %q lacks %q", s, want)
		}
	}
}

// With --ready command the command gets a NOTIFY_SOCKET of fencerun's:
// what its tree says (systemd-notify here, waiting on its barrier) reaches
// the manager from fencerun's pid, READY=1 only when the command says
// it, MAINPID never, and another process's message to that socket never
// (N1).
func TestNotifyReadyCommand(t *testing.T) {
	if _, err := exec.LookPath("systemd-notify"); err != nil {
		t.Skip("no systemd-notify")
	}
	dir := t.TempDir()
	m := newNotifyManager(t)
	script := `echo "$NOTIFY_SOCKET" > "$0"/sock.tmp; mv "$0"/sock.tmp "$0"/sock
while [ ! -e "$0"/go ]; do sleep 0.05; done
systemd-notify --ready --status=serving MAINPID=1
exec sleep 60`
	run := notifyRun(dir, m.Addr, "run", "--key", "sdc", "--ready", "command", "--", "sh", "-c", script, dir)
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { endRun(run.Process); run.Wait() }()
	if s := m.expect(t, run.Process.Pid, "STATUS=holding"); strings.Contains(s, "READY") {
		t.Fatalf("fencerun said %q itself with --ready command", s)
	}
	sock := strings.TrimSpace(waitFile(t, filepath.Join(dir, "sock")))
	if sock == "" || sock == m.Addr {
		t.Fatalf("the command's NOTIFY_SOCKET is %q, want fencerun's relay", sock)
	}
	// A stranger (this test) is not of the command's tree.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("READY=1\nSTATUS=stranger"))
	c.Close()
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	s := m.expect(t, run.Process.Pid, "")
	if strings.Contains(s, "stranger") || strings.Contains(s, "MAINPID") || !strings.Contains(s, "READY=1") || !strings.Contains(s, "STATUS=serving") {
		t.Fatalf("relayed %q, want the command's READY=1 and STATUS=serving only", s)
	}
}

// With WATCHDOG_USEC, fencerun feeds the watchdog from its own pid while
// its lease is renewed (N1); the fenced package's tests show the feeding
// stop with the renewals.
func TestNotifyWatchdog(t *testing.T) {
	dir := t.TempDir()
	m := newNotifyManager(t)
	run := notifyRun(dir, m.Addr, "run", "--key", "sdd", "--", "sleep", "60")
	run.Env = append(run.Env, "WATCHDOG_USEC=200000")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { endRun(run.Process); run.Wait() }()
	for range 3 {
		m.expect(t, run.Process.Pid, "WATCHDOG=1")
	}
}
