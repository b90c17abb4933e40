package integration

// Terminal tests (S7): fencerun run by a shell that leads the session of a
// pseudo-terminal, as a user types at it.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/creack/pty"
)

// ptySession is a shell leading the session of a pty, and what the pty
// printed so far.
type ptySession struct {
	t    *testing.T
	sh   *exec.Cmd
	tty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{} // closed when the pty has no writer left
}

// startPty runs sh -c script as the session leader of a new pty, its
// controlling terminal (pty.Start sets Setsid and Setctty).
func startPty(t *testing.T, s *sandbox, script string) *ptySession {
	t.Helper()
	sh := exec.Command("sh", "-c", script)
	sh.Env = append(os.Environ(), "FENCERUN_DIR="+s.state, "FENCERUN_LOG_LEVEL=debug", s.mark,
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	sh.Dir = s.work
	tty, err := pty.Start(sh)
	if err != nil {
		t.Fatal(err)
	}
	p := &ptySession{t: t, sh: sh, tty: tty, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil { // EIO once the last slave descriptor is closed
				return
			}
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- pty output:\n%s", p.output())
		}
		tty.Close()
	})
	return p
}

func (p *ptySession) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitOutput waits until the pty printed s.
func (p *ptySession) waitOutput(s string) {
	p.t.Helper()
	if err := waitFor(func() bool { return strings.Contains(p.output(), s) }); err != nil {
		p.t.Fatalf("the pty never printed %q", s)
	}
}

// finish waits for the shell to exit and for the pty's output to end, and
// returns the output.
func (p *ptySession) finish() string {
	p.t.Helper()
	if code := exitOf(p.t, p.sh); code != 0 {
		p.t.Errorf("sh: exit %d, want 0", code)
	}
	if err := waitFor(func() bool {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}); err != nil {
		p.t.Fatalf("the pty still has a writer after sh exited")
	}
	return p.output()
}

// ptyEnd is what the scripts print after fencerun: its exit code, then the
// shell's process group and the terminal's foreground process group.
const ptyEnd = `; echo "exit:$?"; awk '{print "fg:", $5, $8}' /proc/$$/stat`

var fgLine = regexp.MustCompile(`fg: (\d+) (\d+)`)

// checkEnd checks fencerun's exit code and that the terminal's foreground
// group is the shell's again.
func checkEnd(t *testing.T, out string, wantExit int) {
	t.Helper()
	if !strings.Contains(out, "exit:"+strconv.Itoa(wantExit)+"\r\n") {
		t.Errorf("fencerun did not exit %d; pty output:\n%s", wantExit, out)
	}
	m := fgLine.FindStringSubmatch(out)
	switch {
	case m == nil:
		t.Errorf("no fg line in the pty output:\n%s", out)
	case m[1] != m[2]:
		t.Errorf("after fencerun exited, the shell's group is %s but the terminal's foreground group is %s: the foreground was not given back", m[1], m[2])
	}
}

// The command reads the terminal: it is in the foreground, so it reads
// rather than being stopped by SIGTTIN.
func TestTerminalRead(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	p := startPty(t, s, `fencerun run --key t -- sh -c 'read x; echo got:$x'`+ptyEnd)
	if _, err := p.tty.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	out := p.finish()
	if !strings.Contains(out, "got:hello") {
		t.Errorf("the command did not read hello; pty output:\n%s", out)
	}
	checkEnd(t, out, 0)
}

// Ctrl-C reaches the command, which traps it and exits 3; fencerun exits 3
// and gives the foreground back.
func TestTerminalCtrlC(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	p := startPty(t, s, `fencerun run --key t -- sh -c 'trap "exit 3" INT; sleep 1000 & echo READY-$$; wait'`+ptyEnd)
	p.waitOutput("READY-")
	// Ctrl-C goes to the terminal's foreground group: wait until that is
	// the command's, not the shell's (which would die of it).
	sh := p.sh.Process.Pid
	if err := waitFor(func() bool {
		f := procStat(sh)
		return len(f) > 5 && f[5] != strconv.Itoa(sh)
	}); err != nil {
		t.Fatalf("the command's group never became the terminal's foreground group (stat of sh: %q)", procStat(sh))
	}
	if _, err := p.tty.Write([]byte{0x03}); err != nil {
		t.Fatal(err)
	}
	checkEnd(t, p.finish(), 3)
}
