package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is a process the harness started. Its stderr goes to a file of its
// own, read back only to explain a failure: a pipe would add a copying
// goroutine to every measured run.
type proc struct {
	argv    []string
	cmd     *exec.Cmd
	errPath string
	done    chan struct{} // closed when the process has been waited for
	err     error         // of Wait; valid after done
	started time.Time
	ended   time.Time
}

var procSeq atomic.Int64

// start starts argv with the harness's environment. The process is killed
// if it runs past the guard: the guard is a failure guard, never a measure.
func (h *harness) start(argv []string) (*proc, error) {
	return h.startFor(argv, 0)
}

// startFor is start for a process meant to run for d, guarded for d more
// than others.
func (h *harness) startFor(argv []string, d time.Duration) (*proc, error) {
	p := &proc{argv: argv, done: make(chan struct{})}
	p.errPath = filepath.Join(h.work, "stderr", strconv.FormatInt(procSeq.Add(1), 10))
	errf, err := os.Create(p.errPath)
	if err != nil {
		return nil, err
	}
	defer errf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d+h.cfg.Guard)
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = h.env
	p.cmd.Stderr = errf
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.ended = time.Now()
		cancel()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// wait waits for the process and checks it exited with code want. The error
// names the command and quotes the end of its stderr.
func (p *proc) wait(want int) error {
	<-p.done
	got := p.cmd.ProcessState.ExitCode()
	if got == want {
		return nil
	}
	why := fmt.Sprintf("exit code %d, want %d", got, want)
	if p.err != nil && got == -1 {
		why = p.err.Error() // killed by a signal, or by the guard
	}
	return fmt.Errorf("%s: %s%s", shortArgv(p.argv), why, p.stderrTail())
}

// kill ends a process the harness gave up on.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) stderrTail() string {
	b, _ := os.ReadFile(p.errPath)
	s := strings.TrimSpace(string(b))
	if s == "" {
		return ""
	}
	if len(s) > 400 {
		s = "…" + s[len(s)-400:]
	}
	return "; stderr: " + s
}

// timing is what one run to completion cost.
type timing struct {
	wall time.Duration // from just before fork to just after wait
	cpu  time.Duration // utime+stime from wait4: the process and what it waited for
}

// runTimed runs argv to completion and measures it, in this goroutine so
// no scheduling of a second goroutine lands inside the measure.
func (h *harness) runTimed(argv []string, want int) (timing, error) {
	errPath := filepath.Join(h.work, "stderr", strconv.FormatInt(procSeq.Add(1), 10))
	errf, err := os.Create(errPath)
	if err != nil {
		return timing{}, err
	}
	defer errf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = h.env
	cmd.Stderr = errf
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return timing{}, fmt.Errorf("start %s: %w", argv[0], err)
	}
	werr := cmd.Wait()
	wall := time.Since(t0)
	if got := cmd.ProcessState.ExitCode(); got != want {
		p := &proc{argv: argv, cmd: cmd, errPath: errPath, err: werr, done: make(chan struct{})}
		close(p.done)
		return timing{}, p.wait(want)
	}
	return timing{wall: wall, cpu: cpuTime(cmd.ProcessState)}, nil
}

// cpuTime is the user and system time wait4 reported for a process, which
// includes the children it waited for.
func cpuTime(ps *os.ProcessState) time.Duration {
	return ps.UserTime() + ps.SystemTime()
}

// output runs argv and returns its stdout, for the few probes that parse it,
// killing it after guard.
func (h *harness) output(argv []string, guard time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = h.env
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("%s: %w: %s", shortArgv(argv), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return out, fmt.Errorf("%s: %w", shortArgv(argv), err)
	}
	return out, nil
}

func shortArgv(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsRune(a, '/') && !strings.ContainsRune(a, ' ') {
			a = filepath.Base(a)
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}

// openFIFO opens a named pipe, which blocks until the other end is opened:
// the harness uses that as the sign that a command under a lock is running.
// It gives up when died is closed (the process that should open the other
// end has exited) or after guard, and then unblocks its own open by opening
// the other end itself.
func openFIFO(path string, flag int, died <-chan struct{}, guard time.Duration) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		f, err := os.OpenFile(path, flag, 0)
		ch <- result{f, err}
	}()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	var why string
	select {
	case r := <-ch:
		return r.f, r.err
	case <-died:
		why = "the process exited before opening it"
	case <-timer.C:
		why = fmt.Sprintf("nobody opened it within %s", guard)
	}
	other := os.O_RDONLY
	if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		other = os.O_WRONLY
	}
	if o, err := os.OpenFile(path, other|syscall.O_NONBLOCK, 0); err == nil {
		if r := <-ch; r.f != nil {
			r.f.Close()
		}
		o.Close()
	}
	return nil, fmt.Errorf("fifo %s: %s", filepath.Base(path), why)
}

func mkfifo(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syscall.Mkfifo(path, 0600)
}

// readStamp reads the one CLOCK_MONOTONIC stamp in path, in nanoseconds.
func readStamp(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if strings.Contains(s, "\n") {
		return 0, fmt.Errorf("%s: more than one stamp", filepath.Base(path))
	}
	return strconv.ParseInt(s, 10, 64)
}

// asleep reports whether every thread of pid is asleep (state S), the sign
// that a waiter has settled into waiting rather than still setting up.
func asleep(pid int) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "stat"))
		if err != nil {
			return false, err
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'S' {
			return false, nil
		}
	}
	return true, nil
}

// vmHWM reads the peak resident set size of pid, in bytes.
func vmHWM(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}
