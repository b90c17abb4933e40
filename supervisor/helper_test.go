package supervisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the helper programs the tests run, chosen by
// its first argument when helperEnv is set.
const helperEnv = "SUPERVISOR_TEST_HELPER"

// guard bounds every wait in the tests; it only turns a hang into a failure.
const guard = 20 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper(os.Args[1], os.Args[2:]))
	}
	// Keep the tests off the terminal of whoever runs them: a command would
	// otherwise be given its foreground.
	if f, err := os.Open(os.DevNull); err == nil {
		unix.Dup2(int(f.Fd()), 0)
		f.Close()
	}
	os.Exit(m.Run())
}

// helper modes:
//
//	run ARGV...     supervise ARGV; print "started PID" on stderr; exit as fencerun would
//	pty ARGV...     as run, and print whether the terminal's foreground is back
//	pty-bg ARGV...  give the terminal to another group first, then as pty
//	trap            say "ready PID" to $INBOX, then "usr1 PID" on SIGUSR1, and exit
//	record          say "ready PID", then "SIGNAL PID" for each signal of forwarded
//	ignore-term     ignore SIGTERM, say "ready PID", and live
//	sigign          print the ignored signals read at init and SigIgn now
func helper(mode string, args []string) int {
	switch mode {
	case "run", "pty", "pty-bg":
		var other *exec.Cmd
		if mode == "pty-bg" {
			other = exec.Command("sleep", "1000")
			other.SysProcAttr = &syscall.SysProcAttr{Foreground: true, Ctty: 0}
			if err := other.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 125
			}
			defer other.Process.Kill()
		}
		grace, _ := time.ParseDuration(os.Getenv("TEST_GRACE"))
		p, err := start(Config{Argv: args, Env: os.Environ(), Grace: grace})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			if ee, ok := err.(*ExecError); ok {
				return map[ExecFailure]int{NotFound: 127, NotExecutable: 126}[ee.Failure]
			}
			return 125
		}
		fmt.Fprintf(os.Stderr, "started %d\n", p.Pid())
		if mode != "run" {
			fg, _ := unix.IoctlGetInt(0, unix.TIOCGPGRP)
			fmt.Printf("command-foreground=%v\n", fg == p.Pid())
		}
		st := p.Wait()
		code := st.Code
		if st.Signal != 0 {
			code = 128 + int(st.Signal) // as a shell reports it
		}
		if mode != "run" {
			fg, _ := unix.IoctlGetInt(0, unix.TIOCGPGRP)
			want := unix.Getpgrp()
			if other != nil {
				want = other.Process.Pid
			}
			fmt.Printf("exit=%d foreground-restored=%v\n", code, fg == want)
		}
		return code
	case "trap":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGUSR1)
		say("ready %d", os.Getpid())
		<-c
		say("usr1 %d", os.Getpid())
		return 0
	case "record":
		c := make(chan os.Signal, 1)
		signal.Notify(c, forwarded...)
		say("ready %d", os.Getpid())
		for sig := range c {
			say("%v %d", sig, os.Getpid())
		}
	case "sigign":
		// What this package read at init, and SigIgn now.
		fmt.Printf("%x %x\n", ignoredAtStart, readStatusSigIgn())
		return 0
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		say("ready %d", os.Getpid())
		for {
			time.Sleep(time.Hour)
		}
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 125
}

// forwarded are the signals CONTRACT.md S7 has fencerun forward.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

func say(format string, args ...any) {
	f, err := os.OpenFile(os.Getenv("INBOX"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(f, format+"\n", args...)
	f.Close()
}

// inbox is a FIFO that the commands of a test write lines to ("echo $! >
// $INBOX"): the test waits for messages, never for time.
type inbox struct {
	path  string
	lines chan string
}

func newInbox(t *testing.T) *inbox {
	t.Helper()
	path := filepath.Join(t.TempDir(), "inbox")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read-write, so that opening does not wait for a writer and the last
	// writer closing is not an end of file.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := &inbox{path: path, lines: make(chan string, 100)}
	go func() {
		s := bufio.NewScanner(f)
		for s.Scan() {
			in.lines <- s.Text()
		}
	}()
	t.Cleanup(func() { f.Close() })
	return in
}

func (in *inbox) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-in.lines:
		return l
	case <-time.After(guard):
		t.Fatal("no message in the inbox")
		return ""
	}
}

// nextPid reads a line holding a pid (possibly after a word) and returns the
// process, so that its end can be checked without mistaking a reused pid.
func (in *inbox) nextPid(t *testing.T) proc {
	t.Helper()
	q, err := in.nextPidMaybeGone(t)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// nextPidMaybeGone is nextPid for a process the supervisor may have
// stopped already by the time the test reads it: the error says so.
func (in *inbox) nextPidMaybeGone(t *testing.T) (proc, error) {
	t.Helper()
	l := in.next(t)
	f := strings.Fields(l)
	pid, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("inbox: %q has no pid", l)
	}
	q, err := readProc(pid)
	if err != nil {
		return q, fmt.Errorf("pid %d from the inbox: %w", pid, err)
	}
	return q, nil
}

type env struct {
	t      *testing.T
	inbox  *inbox
	marker string
	env    []string
	self   string // the test binary, for helper commands
}

func newEnv(t *testing.T) *env {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, inbox: newInbox(t), marker: "FENCERUN_TICK=/nonexistent/ticks/t-" + hex.EncodeToString(b), self: self}
	e.env = append(os.Environ(), e.marker, helperEnv+"=1", "INBOX="+e.inbox.path, "H="+self)
	return e
}

// start runs argv under a Process that the test's cleanup stops.
func (e *env) start(grace time.Duration, argv ...string) *Process {
	e.t.Helper()
	p, err := start(Config{Argv: argv, Env: e.env, Marker: e.marker, Grace: grace})
	if err != nil {
		e.t.Fatalf("Start(%q): %v", argv, err)
	}
	e.t.Cleanup(func() {
		p.Stop(0)
		wait(e.t, p)
	})
	return p
}

func (e *env) sh(script string) *Process {
	e.t.Helper()
	return e.start(10*time.Second, "sh", "-c", script)
}

// wait is p.Wait with a failure guard.
func wait(t *testing.T, p *Process) Status {
	t.Helper()
	c := make(chan Status, 1)
	go func() { c <- p.Wait() }()
	select {
	case st := <-c:
		return st
	case <-time.After(guard):
		t.Fatalf("Wait did not return within %v", guard)
		return Status{}
	}
}

func alive(q proc) bool {
	cur, err := readProc(q.pid)
	return err == nil && cur.start == q.start && !cur.dead()
}

// requireGone fails unless q has ended and was reaped (or, when reap is
// false, at least ended).
func requireGone(t *testing.T, q proc, reaped bool) {
	t.Helper()
	cur, err := readProc(q.pid)
	switch {
	case err != nil || cur.start != q.start:
	case !cur.dead():
		t.Errorf("pid %d is still alive (state %c)", q.pid, cur.state)
	case reaped:
		t.Errorf("pid %d was not reaped (state %c, parent %d)", q.pid, cur.state, cur.ppid)
	}
}

// waitGone waits for q's end through a pidfd, with the failure guard.
func waitGone(t *testing.T, q proc) {
	t.Helper()
	fd, err := openProc(q)
	if err != nil {
		t.Fatal(err)
	}
	if fd < 0 {
		return
	}
	defer unix.Close(fd)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	for ctx.Err() == nil {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(guard/time.Millisecond))
		if n > 0 {
			return
		}
		if err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
	}
	t.Fatalf("pid %d did not end within %v", q.pid, guard)
}

// start is Prepare(cfg).Start(cfg.Env, cfg.Logger), the one way to start
// a command.
func start(cfg Config) (*Process, error) {
	return Prepare(cfg).Start(cfg.Env, cfg.Logger)
}
