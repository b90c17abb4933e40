package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/fencerun/fencerun/store"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/testsupport"
)

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   Status
	}{
		{"exit 0", Status{}},
		{"exit 7", Status{Code: 7}},
		{"kill -TERM $$", Status{Signal: syscall.SIGTERM}},
		{"kill -KILL $$", Status{Signal: syscall.SIGKILL}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			p := newEnv(t).sh(tc.script)
			st := wait(t, p)
			if st != tc.want {
				t.Errorf("status %+v, want %+v", st, tc.want)
			}
			if err := p.Signal(syscall.SIGTERM); !errors.Is(err, errFinished) {
				t.Errorf("Signal after Wait: %v, want errFinished", err)
			}
		})
	}
}

func TestCannotRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	plain := write("plain", "#!/bin/sh\nexit 0\n", 0o644)
	garbage := write("garbage", "\x00\x01\x02 not a program\n", 0o755)
	write("script", "#!/bin/sh\nexit 3\n", 0o755)
	pathEnv := "PATH=" + dir + ":/usr/bin:/bin"

	for _, tc := range []struct {
		name  string
		argv0 string
		env   string
		fail  ExecFailure
		cause error
		says  string // in the message besides the path
	}{
		{"not in PATH", "fencerun-no-such-command", pathEnv, NotFound, exec.ErrNotFound, "fencerun-no-such-command"},
		{"no such path", dir + "/nope", pathEnv, NotFound, syscall.ENOENT, "no such file or directory"},
		{"not executable", plain, pathEnv, NotExecutable, syscall.EACCES, "permission denied"},
		{"not executable in PATH", "plain", pathEnv, NotExecutable, syscall.EACCES, "permission denied"},
		{"directory", dir, pathEnv, NotExecutable, syscall.EISDIR, "is a directory"},
		{"dot: a directory found in PATH", ".", pathEnv, NotExecutable, syscall.EISDIR, "is a directory"},
		{"not a program", garbage, pathEnv, NotExecutable, syscall.ENOEXEC, "exec format error"},
		{"PATH of the command, not ours", "script", "PATH=/nonexistent", NotFound, exec.ErrNotFound, "script"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := start(Config{Argv: []string{tc.argv0}, Env: []string{tc.env}})
			var ee *ExecError
			if !errors.As(err, &ee) {
				t.Fatalf("Start: %v, want an *ExecError", err)
			}
			if ee.Failure != tc.fail || !errors.Is(err, tc.cause) {
				t.Errorf("failure %d, cause %v; want %d, %v", ee.Failure, ee.Err, tc.fail, tc.cause)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "supervisor: ") || !strings.Contains(msg, tc.says) || !strings.Contains(msg, filepath.Base(tc.argv0)) {
				t.Errorf("message %q should name %s and say %q", msg, tc.argv0, tc.says)
			}
		})
	}

	t.Run("a directory in PATH, a program of that name after it", func(t *testing.T) {
		later := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "twice"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(later, "twice"), []byte("#!/bin/sh\nexit 4\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		p, err := start(Config{Argv: []string{"twice"}, Env: []string{"PATH=" + dir + ":" + later}})
		if err != nil {
			t.Fatal(err)
		}
		if st := wait(t, p); st.Code != 4 {
			t.Errorf("status %+v, want code 4", st)
		}
	})

	t.Run("found in the command's PATH", func(t *testing.T) {
		p, err := start(Config{Argv: []string{"script"}, Env: []string{pathEnv}})
		if err != nil {
			t.Fatal(err)
		}
		if st := wait(t, p); st.Code != 3 {
			t.Errorf("status %+v, want code 3", st)
		}
	})
}

func TestStopGroup(t *testing.T) {
	e := newEnv(t)
	p := e.sh(`sleep 1000 & echo $! > $INBOX; sleep 1000 & echo $! > $INBOX; wait`)
	a, b := e.inbox.nextPid(t), e.inbox.nextPid(t)
	for _, q := range []proc{a, b} {
		if q.pgid != p.Pid() {
			t.Fatalf("pid %d is in group %d, not the command's %d", q.pid, q.pgid, p.Pid())
		}
	}
	sh, _ := readProc(p.Pid())
	p.Stop(10 * time.Second)
	if st := wait(t, p); st.Signal != syscall.SIGTERM {
		t.Errorf("status %+v, want death by SIGTERM", st)
	}
	for _, q := range []proc{sh, a, b} {
		requireGone(t, q, true)
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	e := newEnv(t)
	p := e.start(10*time.Second, e.self, "ignore-term")
	e.inbox.next(t)
	const grace = 300 * time.Millisecond
	t0 := time.Now()
	p.Stop(time.Hour)
	p.Stop(grace) // shortens
	p.Stop(time.Hour)
	st := wait(t, p)
	if st.Signal != syscall.SIGKILL {
		t.Errorf("status %+v, want death by SIGKILL", st)
	}
	if d := time.Since(t0); d < grace {
		t.Errorf("killed after %v, before the grace of %v", d, grace)
	}
}

func TestStopStoppedCommand(t *testing.T) {
	e := newEnv(t)
	p := e.sh(`kill -STOP $$; exit 0`)
	// The stop is the supervisor's to consume (job control): watch /proc.
	testsupport.WaitFor(t, "the command to stop", func() bool {
		q, err := readProc(p.Pid())
		return err == nil && q.state == 'T'
	})
	// With an hour of grace, only SIGCONT lets SIGTERM end it in time.
	p.Stop(time.Hour)
	if st := wait(t, p); st.Signal != syscall.SIGTERM {
		t.Errorf("status %+v, want death by SIGTERM", st)
	}
}

func TestSignalReachesTheTree(t *testing.T) {
	e := newEnv(t)
	// Three helpers in the group, one in a session of its own; the shell
	// traps the signal too, and waits for all of them.
	p := e.sh(`trap 'echo usr1 $$ > $INBOX' USR1
		$H trap & $H trap & $H trap & setsid $H trap &
		until wait; do :; done`)
	want := map[int]bool{p.Pid(): true}
	for range 4 {
		want[e.inbox.nextPid(t).pid] = true
	}
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var pid int
		if l := e.inbox.next(t); !strings.HasPrefix(l, "usr1 ") {
			t.Fatalf("inbox: %q", l)
		} else {
			fmt.Sscanf(l, "usr1 %d", &pid)
		}
		if !want[pid] {
			t.Errorf("unexpected or repeated usr1 from %d", pid)
		}
		delete(want, pid)
	}
	if st := wait(t, p); st != (Status{}) {
		t.Errorf("status %+v, want exit 0", st)
	}
}

func TestForwardedSignals(t *testing.T) {
	e := newEnv(t)
	// One in the group, one in a session of its own.
	p := e.sh(`setsid $H record & exec $H record`)
	e.inbox.next(t)
	e.inbox.next(t)
	for _, sig := range forwarded {
		if err := p.Signal(sig.(syscall.Signal)); err != nil {
			t.Fatal(err)
		}
		pids := map[int]bool{}
		for range 2 {
			var name string
			var pid int
			l := e.inbox.next(t)
			if _, err := fmt.Sscanf(strings.Replace(l, sig.String(), "got", 1), "%s %d", &name, &pid); err != nil || name != "got" {
				t.Fatalf("sent %v, the inbox says %q", sig, l)
			}
			pids[pid] = true
		}
		if len(pids) != 2 {
			t.Errorf("%v reached one process twice: %v", sig, pids)
		}
	}
}

func TestOnlyStdFilesInherited(t *testing.T) {
	e := newEnv(t)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// dup2 leaves the copy without close-on-exec, like a descriptor this
	// process could have inherited.
	const fd = 42
	if err := unix.Dup2(int(f.Fd()), fd); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	p := e.sh(`if [ -e /proc/self/fd/42 ]; then echo leaked > $INBOX; else echo clean > $INBOX; fi`)
	if got := e.inbox.next(t); got != "clean" {
		t.Errorf("the command says %s", got)
	}
	wait(t, p)
}

func TestLeftoverStoppedAfterExit(t *testing.T) {
	e := newEnv(t)
	p := e.start(time.Hour, "sh", "-c", `sleep 1000 & echo $! > $INBOX`)
	left := e.inbox.nextPid(t)
	<-p.Exited()
	if !alive(left) {
		t.Fatal("the leftover ended before Wait")
	}
	// An hour of grace: Wait returns within the guard only because the
	// leftover dies of the stop signal.
	if st := wait(t, p); st != (Status{}) {
		t.Errorf("status %+v, want exit 0", st)
	}
	requireGone(t, left, true)
}

func TestLeftoverHoldingStdoutPipe(t *testing.T) {
	e := newEnv(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(e.self, "run", "sh", "-c", `sleep 1000 & echo $! > $INBOX; echo hello`)
	cmd.Env = append(e.env, "TEST_GRACE=1h")
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// The command exits at once, and its leftover is stopped then: it may
	// be gone before its pid is read here, which is what is wanted.
	left, gone := e.inbox.nextPidMaybeGone(t)
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r) // the end of file needs the leftover gone too
		out <- string(b)
	}()
	select {
	case got := <-out:
		if got != "hello\n" {
			t.Errorf("output %q", got)
		}
	case <-time.After(guard):
		cmd.Process.Kill()
		t.Fatal("stdout still open: the leftover is alive")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("wrapper: %v, want exit 0", err)
	}
	if gone == nil {
		requireGone(t, left, false)
	}
}

func TestEscapedDescendants(t *testing.T) {
	e := newEnv(t)
	// A new session keeping the environment; a double fork staying in the
	// group; a double fork into a new session with an empty environment,
	// found only as an orphan reparented to us.
	p := e.sh(`setsid sh -c 'echo setsid $$ > $INBOX; exec sleep 1000' &
		(sleep 1000 & echo fork $! > $INBOX)
		(env -i setsid sleep 1000 & echo cleared $! > $INBOX)
		echo reparented > $INBOX
		exec sleep 1000`)
	// The messages come in any order; "reparented" comes after the
	// subshells exited, so their children are ours by then.
	escaped := map[string]proc{}
	for len(escaped) < 4 {
		l := e.inbox.next(t)
		if l == "reparented" {
			escaped[l] = proc{pid: -1}
			continue
		}
		var what string
		var pid int
		if _, err := fmt.Sscanf(l, "%s %d", &what, &pid); err != nil {
			t.Fatalf("inbox: %q", l)
		}
		q, err := readProc(pid)
		if err != nil {
			t.Fatal(err)
		}
		escaped[what] = q
	}
	delete(escaped, "reparented")
	// This test failed once under load in a full run, with no record of
	// its message, and did not fail again in 500 runs under load: if it
	// fails, say what each process was, when it was found and now.
	found := maps.Clone(escaped)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("test process %d, command %d", os.Getpid(), p.Pid())
			show := func(q proc) string {
				return fmt.Sprintf("pid %d ppid %d pgid %d sid %d state %c start %d", q.pid, q.ppid, q.pgid, q.sid, q.state, q.start)
			}
			for what, q := range found {
				now, err := readProc(q.pid)
				t.Logf("%s: found as %s; at the end %s (%v)", what, show(q), show(now), err)
			}
		}
	})
	// Started outside the tree, carrying its marker.
	elsewhere := exec.Command("sleep", "1000")
	elsewhere.Env = e.env
	if err := elsewhere.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { elsewhere.Process.Kill(); elsewhere.Wait() })
	escaped["elsewhere"], _ = readProc(elsewhere.Process.Pid)
	for _, what := range []string{"fork", "cleared"} {
		if cur, _ := readProc(escaped[what].pid); cur.ppid != os.Getpid() {
			t.Fatalf("%s: pid %d has parent %d, not the subreaper %d", what, cur.pid, cur.ppid, os.Getpid())
		}
	}
	for _, q := range escaped {
		if !p.Owns(q.pid) {
			t.Errorf("Owns(%d) is false", q.pid)
		}
	}
	if p.Owns(os.Getpid()) || p.Owns(os.Getppid()) || p.Owns(1) {
		t.Error("Owns is true for a process outside the tree")
	}
	p.Stop(10 * time.Second)
	wait(t, p)
	for what, q := range escaped {
		requireGone(t, q, what != "elsewhere") // the test reaps its own
		if p.Owns(q.pid) {
			t.Errorf("Owns(%d) after Wait", q.pid)
		}
	}
}

func TestPdeathsig(t *testing.T) {
	self, _ := os.Executable()
	cmd := exec.Command(self, "run", "sleep", "1000")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "started %d", &pid); err != nil {
		cmd.Process.Kill()
		t.Fatalf("helper said %q", line)
	}
	q, err := readProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, q)
	// It may have been reparented to the test, a subreaper.
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}

func TestStopLeftovers(t *testing.T) {
	e := newEnv(t)
	run := func(env []string, argv ...string) *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	others := append(os.Environ(), "INBOX="+e.inbox.path)
	marked := append(others[:len(others):len(others)], e.marker)
	plain := run(marked, "sleep", "1000")
	stubborn := run(marked, "sh", "-c", `trap '' TERM; echo ready > $INBOX; sleep 1000; sleep 1000`)
	e.inbox.next(t)
	parent := run(marked, "sh", "-c", `env -i sleep 1000 & echo $! > $INBOX; wait`)
	cleared := e.inbox.nextPid(t)
	unmarked := run(others, "sleep", "1000")
	otherRun := run(append(others[:len(others):len(others)], e.marker+"0"), "sleep", "1000")

	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	host, _ := os.Hostname()
	if _, err := stopLeftovers(ctx, store.Leftover{Host: host, Marker: e.marker}, StopConfig{StopSignal: syscall.SIGTERM, Grace: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  *exec.Cmd
		want syscall.Signal
	}{{plain, syscall.SIGTERM}, {stubborn, syscall.SIGKILL}, {parent, 0}} {
		q, _ := readProc(tc.cmd.Process.Pid)
		if !q.dead() {
			t.Errorf("%v is alive", tc.cmd.Args)
			continue
		}
		tc.cmd.Wait()
		// The shell may see its child die of the signal before it gets its own.
		if ws := tc.cmd.ProcessState.Sys().(syscall.WaitStatus); tc.want != 0 && ws.Signal() != tc.want {
			t.Errorf("%v ended with %v, want %v", tc.cmd.Args, tc.cmd.ProcessState, tc.want)
		}
	}
	requireGone(t, cleared, false)
	var ws syscall.WaitStatus
	syscall.Wait4(cleared.pid, &ws, syscall.WNOHANG, nil) // reparented to the test?
	for _, cmd := range []*exec.Cmd{unmarked, otherRun} {
		if q, err := readProc(cmd.Process.Pid); err != nil || q.dead() {
			t.Errorf("%v was stopped", cmd.Env[len(cmd.Env)-1])
		}
	}
}

// S2 without a cgroup: an orphan that joined this process's own group
// (setpgid to it is allowed: the command shares this process's session)
// and cleared its environment is still one of the tree's, found as an
// orphan reparented here; before, it was taken for a child this process
// started itself and outlived the sweep.
func TestOrphanInThisProcessGroupIsStopped(t *testing.T) {
	e := newEnv(t)
	p := e.sh(`(env -i /usr/bin/perl -e 'setpgrp(0, $ARGV[0]) or die "setpgrp: $!"; open(F, ">>", $ARGV[1]) or die; print F "joined $$\n"; close F; sleep 1000' ` +
		strconv.Itoa(unix.Getpgrp()) + ` $INBOX &); exec sleep 1000`)
	orphan := e.inbox.nextPid(t)
	if orphan.pgid != unix.Getpgrp() {
		t.Fatalf("pid %d is in group %d, not this process's %d: the scenario did not happen", orphan.pid, orphan.pgid, unix.Getpgrp())
	}
	p.Stop(100 * time.Millisecond)
	wait(t, p)
	requireGone(t, orphan, true)
}
