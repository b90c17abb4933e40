package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Waiters at scale (issue 21): P2's queue drain at several lengths, with
// the order the commands ran in and the waiters that did not get their
// turn counted, and P8's idle queue, what N waiters cost at rest.

// drainCounts is what the rounds of one tool at one queue length saw
// besides their times.
type drainCounts struct{ inversions, lost int }

// drains is P2 at scale: for each length n of DrainSizes, n waiters queued
// one by one behind a holder, all asleep, then the holder let go. The
// figure is the time per handoff, from the holder's command's exit to the
// last waiter's end, over n; the figure's text counts the commands that
// ran out of arrival order and the waiters that did not run theirs. The
// 500-waiter row's goal is P2's: at most 1.5x the 10-waiter one.
func (h *harness) drains(pr pair) []row {
	pr.alt, pr.peer2, pr.floor = nil, nil, nil
	var rows []row
	var ten *sample
	for _, n := range h.cfg.DrainSizes {
		h.progress("%s queue drain, %d waiters, %s", pr.id, n, names(pr.tools()))
		r := newRow(pr.id, "", seconds, pr.peer.name, goal{text: "—"})
		tools, samples := pr.tools(), []*sample{r.subj, r.peer}
		specs := h.specs(fmt.Sprintf("%s-drain-%d", strings.ToLower(pr.id), n), tools, samples)
		counts := make([]drainCounts, len(tools))
		interleave(tools, samples, 0, h.cfg.DrainRounds, func(j int, t *tool, _ bool) (float64, error) {
			per, c, err := h.drainOnce(t, specs[j], n)
			counts[j].inversions += c.inversions
			counts[j].lost += c.lost
			return per, err
		})
		r.figure = fmt.Sprintf("queue drain, %d waiters: time per handoff (in %d rounds: fencerun %d out of arrival order, %d lost; %s %d, %d)",
			n, h.cfg.DrainRounds, counts[0].inversions, counts[0].lost, pr.peer.name, counts[1].inversions, counts[1].lost)
		switch {
		case n == 10:
			ten = r.subj
		case n == 500 && ten != nil:
			base := ten
			r.goal = goal{text: "≤ 1.5x the 10-waiter figure", met: func(s, _ float64) bool { return base.ok() && s <= 1.5*base.median() }}
		}
		rows = append(rows, r)
	}
	return rows
}

// drainOnce queues n waiters behind a holder on l and lets them go; each
// waiter's command appends its number to a file, so that the order they
// ran in is known. A waiter that did not run its command, or did not exit
// 0, is lost.
func (h *harness) drainOnce(t *tool, l lockSpec, n int) (float64, drainCounts, error) {
	fifo := filepath.Join(l.files, "go")
	exitStamp := filepath.Join(l.files, "t_exit")
	order := filepath.Join(l.files, "order")
	_ = os.Remove(exitStamp)
	_ = os.Remove(order)
	// A long queue takes long to line up: the guard grows with it.
	queueing := time.Duration(n) * 100 * time.Millisecond
	holder, w, err := h.startFIFOHolder(t, l, fifo, exitStamp, queueing)
	if err != nil {
		return 0, drainCounts{}, err
	}
	waiters := make([]*proc, 0, n)
	stop := func() {
		w.Close()
		holder.kill()
		for _, p := range waiters {
			p.kill()
		}
	}
	// One at a time, each seen queued before the next starts, so that the
	// queue's order is known and every waiter is in it.
	for i := range n {
		p, err := h.startFor(t.argv(l, "sh", "-c", `echo "$0" >> "$1"`, strconv.Itoa(i), order), queueing)
		if err != nil {
			stop()
			return 0, drainCounts{}, err
		}
		waiters = append(waiters, p)
		if err := h.settle(t, l, p, len(waiters)); err != nil {
			stop()
			return 0, drainCounts{}, err
		}
	}
	_, werr := w.WriteString("\n")
	if err := errors.Join(werr, w.Close(), holder.wait(0)); err != nil {
		stop()
		return 0, drainCounts{}, err
	}
	var c drainCounts
	var last time.Time
	for _, p := range waiters {
		if p.wait(0) != nil {
			c.lost++
		}
		if p.ended.After(last) {
			last = p.ended
		}
	}
	span, err := sinceStamp(exitStamp, last)
	if err != nil {
		return 0, c, err
	}
	b, _ := os.ReadFile(order)
	ran := strings.Fields(string(b))
	for i, w := range ran {
		if w != strconv.Itoa(i) {
			c.inversions++
		}
	}
	c.lost = max(c.lost, n-len(ran))
	return span.Seconds() / float64(n), c, nil
}

// sinceStamp is the time from the CLOCK_MONOTONIC stamp in path to the
// wall time last.
func sinceStamp(path string, last time.Time) (time.Duration, error) {
	exited, err := readStamp(path)
	if err != nil {
		return 0, fmt.Errorf("holder's stamp: %w", err)
	}
	now, err := monotonic()
	if err != nil {
		return 0, err
	}
	span := time.Duration(now-exited) - time.Since(last)
	if span <= 0 {
		return 0, errors.New("queue drain: the last waiter ended before the holder's command exited")
	}
	return span, nil
}

// idle is P8: for each count n of IdleSizes, n waiters queued behind a
// holder and left at rest; the figures are the CPU all of them use a
// second together (with, on etcd, the server's), and the Pss of each.
// cpuGoal is the backend's: under 1 ms a second on files, no more than
// etcdctl's on etcd.
func (h *harness) idle(pr pair, server func() int, cpuGoal goal) []row {
	pr.alt, pr.peer2, pr.floor = nil, nil, nil
	var rows []row
	for _, n := range h.cfg.IdleSizes {
		h.progress("%s idle queue, %d waiters, %s", pr.id, n, names(pr.tools()))
		what := fmt.Sprintf("idle queue, %d waiters at rest: CPU a second, all together", n)
		if server != nil {
			what += ", the server's included"
		}
		cpu := newRow("P8", what, seconds, pr.peer.name, cpuGoal)
		pss := newRow("P8", fmt.Sprintf("idle queue, %d waiters at rest: Pss each", n), bytes, pr.peer.name, atMost(3<<20, bytes))
		tools := pr.tools()
		specs := h.specs(fmt.Sprintf("%s-idle-%d", strings.ToLower(pr.id), n), tools, []*sample{cpu.subj, cpu.peer})
		interleave(tools, []*sample{cpu.subj, cpu.peer}, 0, 1, func(j int, t *tool, _ bool) (float64, error) {
			c, p, err := h.idleOnce(t, specs[j], n, server)
			if err != nil {
				[]*sample{pss.subj, pss.peer}[j].fail(err)
			} else {
				[]*sample{pss.subj, pss.peer}[j].add(p)
			}
			return c, err
		})
		rows = append(rows, cpu, pss)
	}
	return rows
}

// idleOnce queues n waiters behind a holder on l, lets them settle, and
// measures them at rest for IdleWindow.
func (h *harness) idleOnce(t *tool, l lockSpec, n int, server func() int) (cpu, pss float64, err error) {
	fifo := filepath.Join(l.files, "go")
	queueing := time.Duration(n)*100*time.Millisecond + h.cfg.IdleWindow
	holder, w, err := h.startFIFOHolder(t, l, fifo, filepath.Join(l.files, "t_exit"), queueing)
	if err != nil {
		return 0, 0, err
	}
	waiters := make([]*proc, 0, n)
	defer func() {
		w.Close()
		holder.kill()
		for _, p := range waiters {
			p.kill()
		}
	}()
	for range n {
		p, err := h.startFor(t.argv(l, "true"), queueing)
		if err != nil {
			return 0, 0, err
		}
		waiters = append(waiters, p)
	}
	if err := h.allQueued(t, l, waiters); err != nil {
		return 0, 0, err
	}
	pids := make([]int, 0, n+1)
	for _, p := range waiters {
		pids = append(pids, p.pid())
	}
	if server != nil && server() > 0 {
		pids = append(pids, server())
	}
	time.Sleep(time.Second) // the scenario: a queue at rest, once started
	before, err := cpuOf(pids)
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(h.cfg.IdleWindow)
	after, err := cpuOf(pids)
	if err != nil {
		return 0, 0, err
	}
	total := 0.0
	for _, p := range pids[:n] {
		v, err := pssOf(p)
		if err != nil {
			return 0, 0, err
		}
		total += v
	}
	return (after - before).Seconds() / h.cfg.IdleWindow.Seconds(), total / float64(n), nil
}

// allQueued waits until the last waiter is queued (n ahead of it, the
// holder included) and every waiter is asleep.
func (h *harness) allQueued(t *tool, l lockSpec, waiters []*proc) error {
	deadline := time.Now().Add(h.cfg.Guard)
	for _, p := range waiters {
		for {
			ok, err := asleep(p.pid())
			if err != nil {
				return fmt.Errorf("waiter %d: %w%s", p.pid(), err, p.stderrTail())
			}
			if ok {
				if queued, err := t.queued(l, p.pid(), len(waiters)); err == nil && queued {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("waiter %d was not seen queued and asleep within %s", p.pid(), h.cfg.Guard)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// cpuOf is the CPU time every thread of pids has run so far
// (/proc/PID/task/TID/schedstat, nanoseconds).
func cpuOf(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		if err != nil || len(stats) == 0 {
			return 0, fmt.Errorf("pid %d: no threads", pid)
		}
		for _, st := range stats {
			b, err := os.ReadFile(st)
			if err != nil {
				continue // a thread that ended
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				continue
			}
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", st, err)
			}
			total += time.Duration(ns)
		}
	}
	return total, nil
}

// pssOf is the proportional set size of pid, in bytes.
func pssOf(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/smaps_rollup: no Pss", pid)
}
