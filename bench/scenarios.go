package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// interleave runs one iteration of each tool in turn, A B A B ..., so that
// drift in the machine (clock frequency, caches, other load) lands on all of
// them alike. The first warm iterations are run and not recorded (one is
// told which with rec, for the figures it records on the side). A tool that
// failed once is not run again: its figure says why.
func interleave(tools []*tool, samples []*sample, warm, n int, one func(j int, t *tool, rec bool) (float64, error)) {
	for j, t := range tools {
		if t.err != nil {
			samples[j].fail(t.err)
		}
	}
	for i := range warm + n {
		for j, t := range tools {
			if samples[j].err != nil {
				continue
			}
			v, err := one(j, t, i >= warm)
			switch {
			case err != nil:
				samples[j].fail(err)
			case i >= warm:
				samples[j].add(v)
			}
		}
	}
}

// specs makes a fresh state directory for each tool of a scenario.
func (h *harness) specs(name string, tools []*tool, samples []*sample) []lockSpec {
	specs := make([]lockSpec, len(tools))
	for j, t := range tools {
		l, err := h.lockFor(t, fmt.Sprintf("%s-%d", name, j))
		if err != nil {
			samples[j].fail(err)
		}
		specs[j] = l
	}
	return specs
}

// lockFor is a fresh lock for one scenario of tool t: k in a fresh state
// directory, or on a shared server a key named after that directory.
func (h *harness) lockFor(t *tool, name string) (lockSpec, error) {
	l, err := h.scenarioDir(name)
	if err == nil && t.shared {
		l.key = "bench-" + filepath.Base(l.files)
	}
	return l, err
}

// A pair is fencerun on one backend and the peer it is measured against
// there: flock(1) for the file backend (P1, P2), `etcdctl lock` for etcd
// (P7, through the same scenarios).
//
// alt, where set, is fencerun with another setting measured beside subj in
// the same interleaving against the same peer: `--cgroup off` beside the
// default `--cgroup auto` on the file backend. peer2, where set, is a
// second peer measured in the same interleaving against the same subj
// sample: the current etcdctl beside Debian's. floor, where set, is a
// program measured in the same interleaving as the least a Go wrapper does
// (bench/floor): its row has subj's ratio to it and no goal, since the
// contract's goals are against the peers.
type pair struct {
	id    string // the contract figure the rows are for
	subj  *tool
	peer  *tool
	alt   *tool
	peer2 *tool
	floor *tool
	// run and handoff are the goals of the uncontended run's wall time
	// and of the handoff.
	run, handoff goal
}

func (pr pair) tools() []*tool {
	t := []*tool{pr.subj, pr.peer}
	if pr.alt != nil {
		t = append(t, pr.alt)
	}
	if pr.peer2 != nil {
		t = append(t, pr.peer2)
	}
	if pr.floor != nil {
		t = append(t, pr.floor)
	}
	return t
}

// rows makes a figure's row, subj against peer; with alt a second row for
// alt against the same peer sample; with peer2 a row of subj's sample
// against peer2. Samples line up with tools().
func (pr pair) rows(figure string, u unit, g goal) ([]row, []*sample) {
	r := newRow(pr.id, figure, u, pr.peer.name, g)
	rows, samples := []row{r}, []*sample{r.subj, r.peer}
	if pr.alt != nil {
		a := newRow(pr.id, figure+", "+altLabel(pr.alt), u, pr.peer.name, g)
		a.peer = r.peer
		rows, samples = append(rows, a), append(samples, a.subj)
	}
	if pr.peer2 != nil {
		p := newRow(pr.id, figure, u, pr.peer2.name, g)
		p.subj = r.subj
		rows, samples = append(rows, p), append(samples, p.peer)
	}
	if pr.floor != nil {
		f := newRow(pr.id, figure+": against a floor", u, pr.floor.name, goal{text: "—"})
		f.subj = r.subj
		rows, samples = append(rows, f), append(samples, f.peer)
	}
	return rows, samples
}

// altLabel is what the alt tool changes: its name after "fencerun ".
func altLabel(t *tool) string {
	return "`" + strings.TrimPrefix(t.name, "fencerun ") + "`"
}

// filePair is fencerun against flock(1): P1 and P2 (10 waiters) allow 3x.
func (h *harness) filePair(id string) pair {
	return pair{id: id, subj: h.fencerun, peer: h.flock, alt: h.fencerunOff, run: ratioAtMost(3), handoff: ratioAtMost(3)}
}

// withFloor is pr with the file backend's floor measured beside it.
func (h *harness) withFloor(pr pair) pair {
	pr.floor = h.floor
	return pr
}

func (h *harness) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// calibrate measures the floor under every figure: what the harness pays to
// spawn a process, and how soon the stamp program takes its stamp.
func (h *harness) calibrate() {
	var spawn, stamp sample
	for i := range h.cfg.Warmup + h.cfg.Runs {
		r, err := h.runTimed([]string{"true"}, 0)
		if err != nil {
			spawn.fail(err)
		} else if i >= h.cfg.Warmup {
			spawn.add(r.wall.Seconds())
		}
		if h.stampErr != nil {
			stamp.fail(h.stampErr)
			continue
		}
		v, err := h.stampLatency()
		if err != nil {
			stamp.fail(err)
		} else if i >= h.cfg.Warmup {
			stamp.add(v)
		}
	}
	h.notes = append(h.notes,
		"Floor: the harness (Go os/exec) spawns and waits for `true` in "+describe(&spawn, seconds)+"; the P1 and P6 wall times include this, for every tool.",
		"Stamp: from just before the harness forks it to the stamp it takes, "+describe(&stamp, seconds)+".")
}

func (h *harness) stampLatency() (float64, error) {
	path := filepath.Join(h.work, "calibrate-stamp")
	_ = os.Remove(path)
	cmd := exec.Command(h.stamp, path)
	cmd.Env = h.env
	t0, err := monotonic()
	if err != nil {
		return 0, err
	}
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("stamp: %w", err)
	}
	got, err := readStamp(path)
	if err != nil {
		return 0, err
	}
	return float64(got-t0) / 1e9, nil
}

func describe(s *sample, u unit) string {
	if !s.ok() {
		return fmt.Sprintf("(not measured: %v)", s.err)
	}
	return fmt.Sprintf("median %s (p10–p90 %s–%s, n=%d)", u.format(s.median()), u.format(s.quantile(0.1)), u.format(s.quantile(0.9)), len(s.vals))
}

// uncontended is P1: the wall time of running `true` under a free lock,
// and the CPU time it took, which is most of what a hold costs besides its
// renewals (P4).
func (h *harness) uncontended(pr pair) []row {
	h.progress("%s uncontended runs, %s", pr.id, names(pr.tools()))
	wall, samples := pr.rows("uncontended `run --key k -- true`, wall time", seconds, pr.run)
	cpu, cpus := pr.rows("uncontended `run --key k -- true`, CPU (utime+stime)", seconds, goal{text: "—"})
	tools := pr.tools()
	specs := h.specs(strings.ToLower(pr.id)+"-run", tools, samples)
	interleave(tools, samples, h.cfg.Warmup, h.cfg.Runs, func(j int, t *tool, rec bool) (float64, error) {
		r, err := h.runTimed(t.argv(specs[j], "true"), 0)
		if err == nil && rec {
			cpus[j].add(r.cpu.Seconds())
		}
		return r.wall.Seconds(), err
	})
	for j := range cpus {
		cpus[j].err = samples[j].err
	}
	return append(wall, cpu...)
}

func names(tools []*tool) string {
	var n []string
	for _, t := range tools {
		n = append(n, t.name)
	}
	return strings.Join(n, ", ")
}

// throughput is P1's rate: SeqRuns sequential `run -- true` per tool, in
// blocks of SeqBlock, the tools' blocks alternating; each block's rate is
// one sample.
func (h *harness) throughput(pr pair) []row {
	h.progress("%s throughput, %d sequential runs each, %s", pr.id, h.cfg.SeqRuns, names(pr.tools()))
	rows, samples := pr.rows(fmt.Sprintf("run throughput: %s sequential `run --key k -- true`", thousands(h.cfg.SeqRuns)), perSec, goal{text: "—"})
	tools := pr.tools()
	specs := h.specs(strings.ToLower(pr.id)+"-seq", tools, samples)
	blocks := max(1, (h.cfg.SeqRuns+h.cfg.SeqBlock-1)/h.cfg.SeqBlock)
	interleave(tools, samples, 0, blocks, func(j int, t *tool, _ bool) (float64, error) {
		n := min(h.cfg.SeqBlock, h.cfg.SeqRuns)
		start := time.Now()
		for range n {
			if _, err := h.runTimed(t.argv(specs[j], "true"), 0); err != nil {
				return 0, err
			}
		}
		return float64(n) / time.Since(start).Seconds(), nil
	})
	return rows
}

// handoff is P2's latency: from the holder's command exiting to the queued
// waiter's command starting, both moments stamped on CLOCK_MONOTONIC.
func (h *harness) handoff(pr pair) []row {
	h.progress("%s handoff latency, %s", pr.id, names(pr.tools()))
	rows, samples := pr.rows("handoff: holder's command exits → waiter's command starts", seconds, pr.handoff)
	tools := pr.tools()
	if h.stampErr != nil {
		for _, s := range samples {
			s.fail(h.stampErr)
		}
		return rows
	}
	specs := h.specs(strings.ToLower(pr.id)+"-handoff", tools, samples)
	interleave(tools, samples, h.cfg.Warmup, h.cfg.Runs, func(j int, t *tool, _ bool) (float64, error) {
		return h.handoffOnce(t, specs[j])
	})
	return rows
}

// handoffOnce holds l with a command that waits on a fifo and then execs the
// stamp as its last act; queues a waiter whose command is the stamp; waits
// until the waiter is queued and asleep; then lets the holder go.
func (h *harness) handoffOnce(t *tool, l lockSpec) (float64, error) {
	fifo := filepath.Join(l.files, "go")
	exitStamp := filepath.Join(l.files, "t_exit")
	startStamp := filepath.Join(l.files, "t_start")
	for _, p := range []string{exitStamp, startStamp} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	holder, w, err := h.startFIFOHolder(t, l, fifo, exitStamp, 0)
	if err != nil {
		return 0, err
	}
	waiter, err := h.start(t.argv(l, h.stamp, startStamp))
	if err != nil {
		w.Close()
		holder.kill()
		return 0, err
	}
	if err := h.settle(t, l, waiter, 1); err != nil {
		w.Close()
		holder.kill()
		waiter.kill()
		return 0, err
	}
	_, werr := w.WriteString("\n")
	if err := errors.Join(werr, w.Close(), holder.wait(0), waiter.wait(0)); err != nil {
		holder.kill()
		waiter.kill()
		return 0, err
	}
	exited, err := readStamp(exitStamp)
	if err != nil {
		return 0, fmt.Errorf("holder's stamp: %w", err)
	}
	started, err := readStamp(startStamp)
	if err != nil {
		return 0, fmt.Errorf("waiter's stamp: %w", err)
	}
	if started < exited {
		return 0, fmt.Errorf("the waiter's command started %d µs before the holder's exited: exclusion broken", (exited-started)/1000)
	}
	return float64(started-exited) / 1e9, nil
}

// settle waits until p, with ahead contenders before it, is queued for l
// and every thread of it has been asleep for a few consecutive looks: then
// the handoff measures waking a settled waiter, not one still starting up.
func (h *harness) settle(t *tool, l lockSpec, p *proc, ahead int) error {
	deadline := time.Now().Add(h.cfg.Guard)
	for queued := false; !queued; {
		select {
		case <-p.done:
			return fmt.Errorf("waiter ended (exit code %d) before the holder let go%s", p.cmd.ProcessState.ExitCode(), p.stderrTail())
		default:
		}
		var err error
		if queued, err = t.queued(l, p.pid(), ahead); err != nil {
			return fmt.Errorf("is the waiter queued: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiter %d was not seen queued within %s", p.pid(), h.cfg.Guard)
		}
		time.Sleep(time.Millisecond)
	}
	for calm := 0; calm < 5; {
		ok, err := asleep(p.pid())
		if err != nil {
			return fmt.Errorf("is the waiter asleep: %w", err)
		}
		if ok {
			calm++
		} else {
			calm = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiter %d did not settle asleep within %s", p.pid(), h.cfg.Guard)
		}
		time.Sleep(time.Millisecond)
	}
	if t.settle > 0 {
		time.Sleep(t.settle)
		if ok, err := asleep(p.pid()); err != nil || !ok {
			return fmt.Errorf("waiter %d not asleep after settling %s: %v", p.pid(), t.settle, err)
		}
	}
	return nil
}

// handoffRate is P2's throughput: LoopWaiters processes each run `true`
// under one lock LoopRuns times, so every run but the first waits in a queue.
func (h *harness) handoffRate(pr pair) row {
	h.progress("%s handoff rate, %d waiters, %s and %s", pr.id, h.cfg.LoopWaiters, pr.subj.name, pr.peer.name)
	pr.alt = nil // the handoff has the --cgroup off figure
	r := newRow(pr.id, fmt.Sprintf("handoffs per second, %d waiters in a loop", h.cfg.LoopWaiters), perSec, pr.peer.name, goal{text: "—"})
	tools, samples := pr.tools(), []*sample{r.subj, r.peer}
	specs := h.specs(strings.ToLower(pr.id)+"-rate", tools, samples)
	interleave(tools, samples, min(h.cfg.Warmup, 1), h.cfg.LoopRounds, func(j int, t *tool, _ bool) (float64, error) {
		return h.loopRound(t, specs[j])
	})
	return r
}

// loopRound returns the rate of completions between the LoopWaiters-th
// first and the LoopWaiters-th last, leaving out the ramp-up (not everyone
// queued yet) and the drain (the queue emptying).
func (h *harness) loopRound(t *tool, l lockSpec) (float64, error) {
	n, per := h.cfg.LoopWaiters, h.cfg.LoopRuns
	var (
		mu   sync.Mutex
		ends []time.Time
		wg   sync.WaitGroup
		gate = make(chan struct{})
		errs = make([]error, n)
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for range per {
				if _, err := h.runTimed(t.argv(l, "true"), 0); err != nil {
					errs[w] = err
					return
				}
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
			}
		}()
	}
	close(gate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	win := ends[n : len(ends)-n]
	span := win[len(win)-1].Sub(win[0]).Seconds()
	if span <= 0 {
		return 0, errors.New("handoff loop: no time passed between completions")
	}
	return float64(len(win)-1) / span, nil
}

// revoke is P3: from issuing `release --force` to the holder's whole tree
// (its shell and two background sleeps) being dead, watched by pidfds, for
// fencerun run as t.
func (h *harness) revoke(t *tool, g goal) []row {
	h.progress("P3 release --force, %s", t.name)
	dead := newRow("P3", "`release --force` issued → holder's whole tree dead ("+t.name+")", seconds, "", g)
	wall := newRow("P3", "`release --force` command, wall time ("+t.name+")", seconds, "", goal{text: "—"})
	tools, samples := []*tool{t}, []*sample{dead.subj}
	specs := h.specs("p3", tools, samples)
	interleave(tools, samples, h.cfg.Warmup, h.cfg.Runs, func(j int, t *tool, rec bool) (float64, error) {
		d, w, err := h.revokeOnce(t, specs[j])
		if err == nil && rec {
			wall.subj.add(w)
		}
		return d, err
	})
	wall.subj.err = dead.subj.err
	return []row{dead, wall}
}

func (h *harness) revokeOnce(t *tool, l lockSpec) (dead, wall float64, err error) {
	fifo := filepath.Join(l.files, "pids")
	if err := mkfifo(fifo); err != nil {
		return 0, 0, err
	}
	holder, err := h.start(t.argv(l, "sh", "-c", `sleep 1000 & a=$!; sleep 1000 & b=$!; echo $$ $a $b > "$1"; wait`, "sh", fifo))
	if err != nil {
		return 0, 0, err
	}
	r, err := openFIFO(fifo, os.O_RDONLY, holder.done, h.cfg.Guard)
	if err != nil {
		holder.kill()
		return 0, 0, fmt.Errorf("holder's command did not start: %w%s", err, holder.stderrTail())
	}
	line, err := io.ReadAll(r)
	r.Close()
	var pids []int
	for _, f := range strings.Fields(string(line)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	// Whatever happens below, nothing of this holder's tree outlives the run.
	defer func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		holder.kill()
	}()
	if err != nil || len(pids) != 3 {
		return 0, 0, fmt.Errorf("holder's command said %q, want three pids: %v", line, err)
	}
	fds := make([]unix.PollFd, 0, len(pids))
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("pidfd_open %d: %w", pid, err)
		}
		defer unix.Close(fd)
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}

	t0 := time.Now()
	rel, err := h.start(t.cli(l, "release", l.key, "--force"))
	if err != nil {
		return 0, 0, err
	}
	if err := waitDead(fds, h.cfg.Guard); err != nil {
		rel.kill()
		return 0, 0, err
	}
	dead = time.Since(t0).Seconds()
	if err := errors.Join(rel.wait(0), holder.wait(76)); err != nil {
		return 0, 0, err
	}
	return dead, rel.ended.Sub(rel.started).Seconds(), nil
}

// waitDead blocks until every pidfd in fds is readable: its process exited.
func waitDead(fds []unix.PollFd, guard time.Duration) error {
	deadline := time.Now().Add(guard)
	for len(fds) > 0 {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return fmt.Errorf("%d processes of the holder's tree still alive after %s", len(fds), guard)
		}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll pidfds: %w", err)
		}
		if n > 0 {
			fds = slices.DeleteFunc(fds, func(p unix.PollFd) bool { return p.Revents != 0 })
		}
	}
	return nil
}

// A holdSet is one backend's tools in the long hold: the rows of their
// CPU and peak RSS.
type holdSet struct {
	pr           pair
	cpuID, rssID string
	cpuFigure    string // the CPU row's figure
	cpu, rss     goal
}

// filePair's hold: P4 and P5.
func (h *harness) fileHold() holdSet {
	return holdSet{
		pr: h.withFloor(h.filePair("P4")), cpuID: "P4", rssID: "P5",
		cpuFigure: fmt.Sprintf("CPU of the wrapper, %s hold at %s TTL, start-up included", human(h.cfg.Hold), human(h.cfg.HoldTTL)),
		cpu:       atMost(0.025, seconds), rss: atMost(20<<20, bytes),
	}
}

// hold is P4 and P5 (and P7's hold on etcd): Holds wrappers of each tool
// of every set hold a lease at once for Hold with a HoldTTL TTL, their
// command a shell blocked on a fifo. Peak RSS is read from /proc just
// before the command is let go; CPU is the wrapper's rusage from wait4,
// which includes its startup, acquire and release, and the shell it waited
// for (under 1 ms, the same for every tool).
func (h *harness) hold(sets ...holdSet) []row {
	h.progress("P4/P5 %d holds of %s at TTL %s", h.cfg.Holds, human(h.cfg.Hold), human(h.cfg.HoldTTL))
	type held struct {
		cpu, rss *sample
		p        *proc
		w        *os.File
	}
	var (
		rows  []row
		holds []held
	)
	type setSamples struct {
		tools      []*tool
		cpus, rsss []*sample
	}
	all := make([]setSamples, len(sets))
	for k, set := range sets {
		pr := set.pr
		pr.id = set.cpuID
		cpu, cpus := pr.rows(set.cpuFigure, seconds, set.cpu)
		pr.id = set.rssID
		rss, rsss := pr.rows("peak RSS (VmHWM) of the wrapper", bytes, set.rss)
		rows = append(append(rows, cpu...), rss...)
		all[k] = setSamples{pr.tools(), cpus, rsss}
	}
	for i := range h.cfg.Holds {
		for k, ss := range all {
			for j, t := range ss.tools {
				cpu, rss := ss.cpus[j], ss.rsss[j]
				if t.err != nil {
					cpu.fail(t.err)
					rss.fail(t.err)
					continue
				}
				l, err := h.lockFor(t, fmt.Sprintf("hold-%d-%d-%d", k, j, i))
				if err != nil {
					cpu.fail(err)
					continue
				}
				l.ttl = h.cfg.HoldTTL
				fifo := filepath.Join(l.files, "go")
				if err := mkfifo(fifo); err != nil {
					cpu.fail(err)
					continue
				}
				p, err := h.startFor(t.argv(l, "sh", "-c", `read x < "$1"`, "sh", fifo), h.cfg.Hold)
				if err != nil {
					cpu.fail(err)
					continue
				}
				w, err := openFIFO(fifo, os.O_WRONLY, p.done, h.cfg.Guard)
				if err != nil {
					p.kill()
					cpu.fail(fmt.Errorf("held command did not start: %w%s", err, p.stderrTail()))
					continue
				}
				holds = append(holds, held{cpu, rss, p, w})
			}
		}
	}
	time.Sleep(h.cfg.Hold) // the figure is the cost of holding this long
	for _, x := range holds {
		if v, err := vmHWM(x.p.pid()); err != nil {
			x.rss.fail(err)
		} else {
			x.rss.add(v)
		}
		_, _ = x.w.WriteString("\n")
		x.w.Close()
	}
	for _, x := range holds {
		if err := x.p.wait(0); err != nil {
			x.cpu.fail(err)
			continue
		}
		x.cpu.add(cpuTime(x.p.cmd.ProcessState).Seconds())
	}
	for _, ss := range all {
		for j := range ss.tools {
			if ss.rsss[j].err == nil && ss.cpus[j].err != nil && len(ss.rsss[j].vals) == 0 {
				ss.rsss[j].fail(ss.cpus[j].err)
			}
		}
	}
	return rows
}

// keyFormat names P6's keys by index, for the CLI and bench/populate alike.
const keyFormat = "bench-%05d"

func keyName(i int) string { return fmt.Sprintf(keyFormat, i) }

// keys is P6: list over Keys keys, and status of one key in a store of Keys
// keys against the same in a store of FewKeys keys.
func (h *harness) keys() []row {
	list := newRow("P6", fmt.Sprintf("`list` over %s keys", thousands(h.cfg.Keys)), seconds, "", atMost(1, seconds))
	status := newRow("P6", fmt.Sprintf("`status` of one key among %s keys (peer: among %d)", thousands(h.cfg.Keys), h.cfg.FewKeys),
		seconds, fmt.Sprintf("%d keys", h.cfg.FewKeys), ratioAtMost(1.5))
	t := h.fencerun
	if t.err != nil {
		for _, s := range []*sample{list.subj, status.subj, status.peer} {
			s.fail(t.err)
		}
		return []row{list, status}
	}
	var stores [2]lockSpec // many keys, few keys
	for i, n := range []int{h.cfg.Keys, h.cfg.FewKeys} {
		h.progress("P6 making %d keys", n)
		l, err := h.scenarioDir(fmt.Sprintf("p6-%d", n))
		if err == nil {
			err = h.populateKeys(t, l.dir, n)
		}
		if err != nil {
			err = fmt.Errorf("making %d keys: %w", n, err)
			for _, s := range []*sample{list.subj, status.subj, status.peer} {
				s.fail(err)
			}
			return []row{list, status}
		}
		stores[i] = lockSpec{dir: l.dir, key: keyName(h.cfg.FewKeys / 2)}
	}
	h.progress("P6 list and status")
	interleave([]*tool{t}, []*sample{list.subj}, min(h.cfg.Warmup, 1), h.cfg.ListRuns, func(int, *tool, bool) (float64, error) {
		r, err := h.runTimed(t.cli(stores[0], "list"), 0)
		return r.wall.Seconds(), err
	})
	interleave([]*tool{t, t}, []*sample{status.subj, status.peer}, h.cfg.Warmup, h.cfg.Runs, func(j int, t *tool, _ bool) (float64, error) {
		r, err := h.runTimed(t.cli(stores[j], "status", stores[j].key), 0)
		return r.wall.Seconds(), err
	})
	return []row{list, status}
}

// populateKeys makes n keys, through package filestore where bench/populate
// built, else through the CLI, two runs per CPU at a time; then it checks
// that `list --json` sees them all.
func (h *harness) populateKeys(t *tool, dir string, n int) error {
	var err error
	if h.populate != "" {
		// About 4 ms a key here (fsync-bound); the guard leaves ample room.
		guard := h.cfg.Guard + time.Duration(n)*20*time.Millisecond
		_, err = h.output([]string{h.populate, "-dir", dir, "-keys", strconv.Itoa(n), "-format", keyFormat}, guard)
	} else {
		err = h.populateCLI(t, dir, n)
	}
	if err != nil {
		return err
	}
	out, err := h.output(t.cli(lockSpec{dir: dir}, "list", "--json"), h.cfg.Guard)
	if err != nil {
		return err
	}
	var all []json.RawMessage
	if err := json.Unmarshal(out, &all); err != nil {
		return fmt.Errorf("list --json: %w: %.200s", err, out)
	}
	if len(all) != n {
		return fmt.Errorf("list --json shows %d keys, want %d", len(all), n)
	}
	return nil
}

func (h *harness) populateCLI(t *tool, dir string, n int) error {
	var (
		next  = make(chan int)
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 2 * runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := h.runTimed(t.argv(lockSpec{dir: dir, key: keyName(i)}, "true"), 0); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// startFIFOHolder starts a holder whose command waits to read fifo and
// then execs the stamp program into exitStamp, and returns it with the
// fifo's write end: the open returns once the holder's command has the
// fifo open, so it runs and its wrapper holds the lock. It is guarded for
// d more than other processes (startFor): a long queue lines up behind it.
func (h *harness) startFIFOHolder(t *tool, l lockSpec, fifo, exitStamp string, d time.Duration) (*proc, *os.File, error) {
	if err := mkfifo(fifo); err != nil {
		return nil, nil, err
	}
	holder, err := h.startFor(t.argv(l, "sh", "-c", `read x < "$1"; exec "$2" "$3"`, "sh", fifo, h.stamp, exitStamp), d)
	if err != nil {
		return nil, nil, err
	}
	w, err := openFIFO(fifo, os.O_WRONLY, holder.done, h.cfg.Guard)
	if err != nil {
		holder.kill()
		return nil, nil, fmt.Errorf("holder's command did not start: %w%s", err, holder.stderrTail())
	}
	return holder, w, nil
}
