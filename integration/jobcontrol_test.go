package integration

// Job control (S7): fencerun as a job of a real interactive bash on a
// pseudo-terminal, typed at as a user would; and, without a terminal, a
// stopped command stays fenced.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/creack/pty"
)

// shellPty is an interactive bash leading the session of a pty: job
// control on, its prompt a marker the test counts.
type shellPty struct {
	t   *testing.T
	sh  *exec.Cmd
	tty *os.File

	mu      sync.Mutex
	out     strings.Builder
	changed chan struct{}
	seen    int // prompts the test has waited for
}

// prompt is bash's PS1: the test waits for it to know the shell is
// reading a command again.
const prompt = "<fr-prompt>"

func startShell(t *testing.T, s *sandbox) *shellPty {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	sh := exec.Command("bash", "--norc", "--noprofile", "--noediting", "-i")
	sh.Env = append(os.Environ(), "PS1="+prompt, "TERM=dumb", "FENCERUN_DIR="+s.state, "FENCERUN_LOG_LEVEL=debug", s.mark,
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	sh.Dir = s.work
	tty, err := pty.Start(sh) // setsid, and the pty as controlling terminal
	if err != nil {
		t.Fatal(err)
	}
	p := &shellPty{t: t, sh: sh, tty: tty, changed: make(chan struct{}, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			select {
			case p.changed <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- pty output:\n%s", p.output())
		}
		sh.Process.Kill()
		sh.Wait()
		tty.Close()
	})
	p.waitPrompt()
	return p
}

func (p *shellPty) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor waits until cond holds of the pty's output so far.
func (p *shellPty) waitFor(what string, cond func(string) bool) {
	p.t.Helper()
	if err := waitFor(func() bool { return cond(p.output()) }); err != nil {
		p.t.Fatalf("the pty never showed %s", what)
	}
}

// waitOutput waits until the pty has shown s.
func (p *shellPty) waitOutput(s string) {
	p.t.Helper()
	p.waitFor(`"`+s+`"`, func(out string) bool { return strings.Contains(out, s) })
}

// waitPrompt waits for the shell's next prompt.
func (p *shellPty) waitPrompt() {
	p.t.Helper()
	p.seen++
	n := p.seen
	p.waitFor("prompt "+strings.Repeat("I", min(n, 20)), func(out string) bool { return strings.Count(out, prompt) >= n })
}

// typ types s at the terminal.
func (p *shellPty) typ(s string) {
	p.t.Helper()
	if _, err := p.tty.Write([]byte(s)); err != nil {
		p.t.Fatal(err)
	}
}

// run types a command line and waits for the prompt after it.
func (p *shellPty) run(line string) {
	p.t.Helper()
	p.typ(line + "\n")
	p.waitPrompt()
}

// Ctrl-Z stops the command and fencerun with it: the prompt comes back
// with the job stopped; fg resumes both, the command reads the terminal
// again, and Ctrl-C then reaches it (130).
func TestJobControlCtrlZ(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	p := startShell(t, s)
	p.typ(`fencerun run --key jc -- sh -c 'echo $$ > cmd.pid; while read l; do echo "got:$l"; done'` + "\n")
	p.typ("one\n")
	p.waitOutput("got:one")
	cmd := readPids(s.path("cmd.pid"))[0]
	p.typ("\x1a") // Ctrl-Z
	p.waitPrompt()
	if !strings.Contains(p.output(), "Stopped") {
		t.Fatalf("bash did not say the job stopped")
	}
	if st := procState(cmd); st != 'T' {
		t.Errorf("the command's state is %c, want T (stopped)", st)
	}
	p.run("jobs -l > jobs.txt")
	if b, _ := os.ReadFile(s.path("jobs.txt")); !strings.Contains(string(b), "Stopped") {
		t.Errorf("jobs says %q, want the job Stopped", b)
	}
	p.typ("fg\n")
	p.typ("two\n")
	p.waitOutput("got:two")
	p.typ("\x03") // Ctrl-C
	p.waitPrompt()
	p.typ("echo \"exit:$?\"\n")
	p.waitOutput("exit:130")
	p.waitPrompt()
}

// A fenced command started with & that reads the terminal is stopped by
// the kernel (SIGTTIN), fencerun with it; fg gives it the terminal and it
// reads the line typed.
func TestJobControlBackgroundThenFg(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	p := startShell(t, s)
	p.run("set -b") // report job changes at once
	p.typ(`fencerun run --key jc -- sh -c 'read l; echo "got:$l"' &` + "\n")
	p.waitPrompt()
	p.waitOutput("Stopped")
	p.typ("fg\n")
	p.typ("hello\n")
	p.waitOutput("got:hello")
	p.waitPrompt()
	p.typ("echo \"exit:$?\"\n")
	p.waitOutput("exit:0")
}

// kill of a stopped job (bash sends SIGTERM, then SIGCONT) ends the
// command: fencerun forwards SIGTERM and continues the command only after
// checking its lease; the command's TERM trap runs and exits 5, which bash
// reports as the job's end.
func TestJobControlTermOfStoppedJob(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	p := startShell(t, s)
	p.run("set -b") // report the job's end at once: wait %1 may still see it stopped
	p.typ(`fencerun run --key jc -- sh -c 'trap "echo ter\"\"med; exit 5" TERM; echo "rea""dy"; while :; do read l; done'` + "\n")
	p.waitOutput("ready")
	p.typ("\x1a")
	p.waitPrompt()
	p.typ("kill %1\n")
	p.waitOutput("Exit 5")
	if !strings.Contains(p.output(), "termed") {
		t.Errorf("the command's TERM trap did not run")
	}
}

// A lease revoked while the job is stopped: on fg, fencerun asks the store
// first, and stops the command for good (76) without letting it run again:
// neither its CONT nor its TERM trap runs.
func TestJobControlLeaseLostWhileStopped(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	p := startShell(t, s)
	p.typ(`fencerun run --key jc -- sh -c 'trap "echo cont >> ran" CONT; trap "echo term >> ran" TERM; echo "rea""dy"; while :; do read l; done'` + "\n")
	p.waitOutput("ready")
	p.typ("\x1a")
	p.waitPrompt()
	if code := s.run("release", "release", "jc", "--force"); code != 0 {
		t.Fatalf("release --force: exit %d", code)
	}
	p.typ("fg; echo \"exit:$?\"\n")
	p.waitOutput("exit:76")
	if b, err := os.ReadFile(s.path("ran")); err == nil {
		t.Errorf("the command ran again after the lease was lost: %q", b)
	}
	if st := s.status("jc"); st.State != "free" {
		t.Errorf("key jc is %s, want free", st.State)
	}
}

// Without a terminal fencerun never stops itself: a command stopped by
// SIGSTOP, or by a SIGTSTP sent to fencerun, stays fenced, and SIGTERM to
// fencerun reaches it followed by SIGCONT (143).
func TestStoppedCommandWithoutTerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(wrapper, cmd int) error
	}{
		{"SIGSTOP of the command", func(_, cmd int) error { return syscall.Kill(cmd, syscall.SIGSTOP) }},
		{"SIGTSTP to fencerun", func(wrapper, _ int) error { return syscall.Kill(wrapper, syscall.SIGTSTP) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			c := s.fencerun("w", "run", "--key", "nt", "--", "sh", "-c", `echo $$ > cmd.pid; exec sleep 1000`)
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no controlling terminal
			s.start(c)
			cmd := readPids(waitPath(t, s.path("cmd.pid")))[0]
			if err := tc.stop(c.Process.Pid, cmd); err != nil {
				t.Fatal(err)
			}
			if err := waitFor(func() bool { return procState(cmd) == 'T' }); err != nil {
				t.Fatalf("the command never stopped (state %c)", procState(cmd))
			}
			if st := procState(c.Process.Pid); st == 'T' {
				t.Errorf("fencerun stopped itself without a terminal")
			}
			if err := c.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := exitOf(t, c); code != 143 {
				t.Errorf("exit %d, want 143", code)
			}
			waitGone(t, cmd)
		})
	}
}

// Issue 24, N4: without a terminal, kill -TSTP of fencerun stops the
// command, and a later kill -CONT of fencerun runs it again; before, the
// SIGCONT never reached it and it stayed stopped.
func TestContinueWithoutTerminal(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	c := s.fencerun("w", "run", "--key", "nt", "--", "sh", "-c", `echo $$ > cmd.pid; exec sleep 1000`)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no controlling terminal
	s.start(c)
	cmd := readPids(waitPath(t, s.path("cmd.pid")))[0]
	if err := c.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() bool { return procState(cmd) == 'T' }); err != nil {
		t.Fatalf("the command never stopped (state %c)", procState(cmd))
	}
	if err := c.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() bool { return procState(cmd) == 'S' || procState(cmd) == 'R' }); err != nil {
		t.Errorf("the command is still stopped after SIGCONT to fencerun (state %c)", procState(cmd))
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, c); code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
	waitGone(t, cmd)
}

// waitPath waits until path exists with some content, and returns it.
func waitPath(t *testing.T, path string) string {
	t.Helper()
	if err := waitFor(func() bool { b, _ := os.ReadFile(path); return len(b) > 0 && b[len(b)-1] == '\n' }); err != nil {
		t.Fatalf("%s never written", path)
	}
	return path
}
