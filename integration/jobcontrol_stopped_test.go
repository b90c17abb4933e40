package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// beating is a command that stamps the file beat every 0.05 s and exits
// 6 on SIGINT, 7 on SIGHUP; it never reads the terminal. It is bash, which
// forks its commands: dash vforks them, and a Ctrl-Z that comes while its
// child is between vfork and exec stops the child and leaves dash waiting
// in vfork (state D, SIGTSTP pending), never stopped, so that the prompt
// never comes back. That is so with the same dash run by bash without
// fencerun (bash waits for dash to stop, as fencerun does), so it is not
// fencerun's to fix; flock(1) differs only in that it stops itself, being
// in the job's process group.
const beating = `fencerun run --key jc2 -- bash -c 'trap "echo in\"\"ted; exit 6" INT; trap "echo hu\"\"pped; exit 7" HUP; echo $$ > cmd.pid; echo "rea""dy"; i=0; while :; do i=$((i+1)); echo $i > beat.tmp; mv beat.tmp beat; sleep 0.05; done'`

// beats waits until the command's beat file changes from what it holds now:
// the command runs.
func beats(t *testing.T, s *sandbox) {
	t.Helper()
	before, _ := os.ReadFile(s.path("beat"))
	if err := waitFor(func() bool {
		now, _ := os.ReadFile(s.path("beat"))
		return len(now) > 0 && string(now) != string(before)
	}); err != nil {
		t.Fatalf("the command does not run (beat stays %q)", before)
	}
}

// Ctrl-Z and fg twice, then Ctrl-Z and bg: the command runs again each
// time, in the background after bg; kill -INT of the running background
// job reaches the command (its trap exits 6).
func TestJobControlStopFgStopBg(t *testing.T) {
	t.Parallel()
	s, p := startBeating(t)
	cmd := readPids(s.path("cmd.pid"))[0]
	for range 2 {
		p.typ("\x1a")
		p.waitPrompt()
		if st := procState(cmd); st != 'T' {
			t.Fatalf("after Ctrl-Z the command's state is %c, want T", st)
		}
		p.typ("fg\n")
		beats(t, s)
	}
	p.typ("\x1a")
	p.waitPrompt()
	p.run("bg")
	beats(t, s)
	beats(t, s)
	if st := procState(cmd); st == 'T' {
		t.Fatalf("after bg the command is stopped")
	}
	p.run("kill -INT %1")
	p.waitOutput("Exit 6")
	if !strings.Contains(p.output(), "inted") {
		t.Errorf("the command's INT trap did not run")
	}
}

// kill -INT of a stopped job queues SIGINT (bash sends no SIGCONT with
// it); fg continues the job, and fencerun forwards the SIGINT: the
// command's trap exits 6. kill -HUP of a stopped job (bash sends SIGCONT
// with it, as with TERM) ends it with its HUP trap's 7.
func TestJobControlSignalsOfStoppedJob(t *testing.T) {
	t.Parallel()
	s, p := startBeating(t)
	p.typ("\x1a")
	p.waitPrompt()
	p.run("kill -INT %1")
	p.typ("fg; echo \"exit:$?\"\n")
	p.waitOutput("exit:6")
	p.waitPrompt()
	if !strings.Contains(p.output(), "inted") {
		t.Errorf("the command's INT trap did not run")
	}
	p.typ(beating + "\n")
	p.waitFor("ready twice", func(out string) bool { return strings.Count(out, "ready") >= 2 })
	beats(t, s)
	p.typ("\x1a")
	p.waitPrompt()
	p.typ("kill -HUP %1\n")
	p.waitOutput("Exit 7")
	if !strings.Contains(p.output(), "hupped") {
		t.Errorf("the command's HUP trap did not run")
	}
}

// startBeating starts an interactive bash on a pty with its job
// notifications at once (set -b), runs beating in it as a foreground
// job, and returns once the command beats, so that a Ctrl-Z after it
// finds the command running, not still starting (see beating).
func startBeating(t *testing.T) (*sandbox, *shellPty) {
	t.Helper()
	s := newSandbox(t)
	p := startShell(t, s)
	p.run("set -b")
	p.typ(beating + "\n")
	p.waitOutput("ready")
	watchStates(t, s)
	beats(t, s)
	return s, p
}

// watchStates logs, if the test fails, the states of the command and of
// its parent fencerun.
func watchStates(t *testing.T, s *sandbox) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		cmd := readPids(s.path("cmd.pid"))[0]
		st := procStat(cmd)
		if st == nil {
			return
		}
		tty, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd) + "/stat")
		t.Logf("command stat: %s", tty)
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd, cmd))
		for _, pid := range append([]string{st[1], strconv.Itoa(cmd)}, strings.Fields(string(kids))...) {
			b, _ := os.ReadFile("/proc/" + pid + "/status")
			w, _ := os.ReadFile("/proc/" + pid + "/wchan")
			stk, _ := os.ReadFile("/proc/" + pid + "/stack")
			t.Logf("pid %s wchan %s\n%s\n%s", pid, w, b, stk)
		}
	})
}
