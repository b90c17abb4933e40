package supervisor

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// terminal runs a helper as the session leader of a new pseudo-terminal
// and collects what it shows.
type terminal struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd

	mu      sync.Mutex
	out     strings.Builder
	changed chan struct{}
}

func newTerminal(t *testing.T, args ...string) *terminal {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	self, _ := os.Executable()
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	term := &terminal{t: t, master: master, cmd: cmd, changed: make(chan struct{}, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			term.mu.Lock()
			term.out.Write(b[:n])
			term.mu.Unlock()
			select {
			case term.changed <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		master.Close()
	})
	return term
}

// expect waits until the terminal has shown s.
func (term *terminal) expect(s string) {
	term.t.Helper()
	timeout := time.After(guard)
	for {
		term.mu.Lock()
		out := term.out.String()
		term.mu.Unlock()
		if strings.Contains(out, s) {
			return
		}
		select {
		case <-term.changed:
		case <-timeout:
			term.t.Fatalf("the terminal did not show %q; it shows:\n%s", s, out)
		}
	}
}

func (term *terminal) write(s string) {
	term.t.Helper()
	if _, err := term.master.Write([]byte(s)); err != nil {
		term.t.Fatal(err)
	}
}

func TestTerminalForeground(t *testing.T) {
	term := newTerminal(t, "pty", "sh", "-c", `read x; echo got $x; exec sleep 1000`)
	term.expect("command-foreground=true")
	// The command reads the terminal: in the background, SIGTTIN would
	// stop it and it would never answer.
	term.write("hello\n")
	term.expect("got hello")
	// Ctrl-C reaches the command's group, and not the wrapper.
	term.write("\x03")
	term.expect("exit=130 foreground-restored=true")
	if err := term.cmd.Wait(); err == nil || term.cmd.ProcessState.ExitCode() != 130 {
		t.Errorf("wrapper: %v, want exit 130", err)
	}
}

func TestTerminalBackground(t *testing.T) {
	// The wrapper's group is not the foreground one, as after &: it must
	// neither take the foreground nor "give it back" to itself.
	term := newTerminal(t, "pty-bg", "sh", "-c", `exit 4`)
	term.expect("command-foreground=false")
	term.expect("exit=4 foreground-restored=true")
}
