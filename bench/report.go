package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// row is one figure of the table: fencerun's sample, the peer's (nil where
// no peer exists) and the goal CONTRACT.md sets for it.
type row struct {
	id       string // P1..P7
	figure   string
	unit     unit
	subj     *sample
	peer     *sample
	peerName string
	goal     goal
}

func newRow(id, figure string, u unit, peerName string, g goal) row {
	r := row{id: id, figure: figure, unit: u, subj: &sample{}, peerName: peerName, goal: g}
	if peerName != "" {
		r.peer = &sample{}
	}
	return r
}

// goal is a target on the medians; met nil means the figure has none.
type goal struct {
	text      string
	met       func(subj, peer float64) bool
	needsPeer bool
}

func ratioAtMost(x float64) goal {
	return goal{
		text:      fmt.Sprintf("≤ %gx peer", x),
		met:       func(s, p float64) bool { return s <= x*p },
		needsPeer: true,
	}
}

func atMost(limit float64, u unit) goal {
	text := u.format(limit)
	if u == seconds && limit < 1 {
		text = fmt.Sprintf("%g ms", limit*1e3)
	}
	if u == bytes {
		text = fmt.Sprintf("%g MiB", limit/(1<<20))
	}
	return goal{text: "≤ " + text, met: func(s, _ float64) bool { return s <= limit }}
}

// verdict is the met? cell: yes, no, — (no goal), or unknown (not measured).
func (r row) verdict() string {
	switch {
	case r.goal.met == nil:
		return "—"
	case !r.subj.ok(), r.goal.needsPeer && !r.peer.ok():
		return "unknown"
	case r.goal.met(r.subj.median(), r.peerMedian()):
		return "yes"
	}
	return "**no**"
}

func (r row) peerMedian() float64 {
	if !r.peer.ok() {
		return math.NaN()
	}
	return r.peer.median()
}

func (r row) ratio() string {
	if !r.subj.ok() || !r.peer.ok() || r.peer.median() == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", r.subj.median()/r.peer.median())
}

// table renders the rows as markdown. Reasons a figure was not measured
// become numbered notes, each said once however many cells it empties.
func table(rows []row) (string, []string) {
	var notes []string
	seen := map[string]int{}
	why := func(err error) string {
		msg := err.Error()
		n, ok := seen[msg]
		if !ok {
			notes = append(notes, msg)
			n = len(notes)
			seen[msg] = n
		}
		return fmt.Sprintf("not measured [%d]", n)
	}
	median := func(s *sample, u unit) string {
		if !s.ok() {
			if s.err == nil {
				return why(fmt.Errorf("no values recorded"))
			}
			return why(s.err)
		}
		return u.format(s.median())
	}
	var b strings.Builder
	b.WriteString("| figure | fencerun median | spread (p10–p90) | peer median | ratio | goal | met? |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		spread := "—"
		if r.subj.ok() {
			spread = fmt.Sprintf("%s – %s (n=%d)", r.unit.format(r.subj.quantile(0.1)), r.unit.format(r.subj.quantile(0.9)), len(r.subj.vals))
		}
		peer := "—"
		if r.peer != nil {
			peer = median(r.peer, r.unit)
			if r.peer.ok() {
				peer += " (" + r.peerName + ")"
			}
		}
		fmt.Fprintf(&b, "| %s %s | %s | %s | %s | %s | %s | %s |\n",
			r.id, r.figure, median(r.subj, r.unit), spread, peer, r.ratio(), r.goal.text, r.verdict())
	}
	return b.String(), notes
}

// machine describes where the figures were taken, for the header; load is
// /proc/loadavg as read before the run built or started anything.
func machine(cfg config, load string) []string {
	lines := []string{
		fmt.Sprintf("CPUs (nproc): %d", runtime.NumCPU()),
		"CPU model: " + cpuModel(),
		"kernel: " + kernel(),
		"memory: " + memTotal(),
		"load average when the run began (1, 5, 15 min): " + load + " (other load lands in the wall times; the ratios of interleaved runs much less)",
		"Go: " + runtime.Version(),
		fmt.Sprintf("state directories on: %s (%s)", fsType(cfg.Tmp), tmpDir(cfg)),
	}
	if out, err := exec.Command("flock", "--version").Output(); err == nil {
		lines = append(lines, "peer: "+firstLine(out))
	}
	rev := exec.Command("git", "describe", "--always", "--dirty")
	rev.Dir = cfg.Root
	if out, err := rev.Output(); err == nil {
		lines = append(lines, "fencerun revision: "+firstLine(out))
	}
	return lines
}

func memTotal() string {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(si.Totalram)*float64(si.Unit)/(1<<30))
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func tmpDir(cfg config) string {
	if cfg.Tmp != "" {
		return cfg.Tmp
	}
	return os.TempDir()
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

// fsType names the filesystem the state directories live on: fsyncs cost
// nothing on tmpfs and much on a disk, which moves fencerun's figures and
// not flock(1)'s.
func fsType(dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("filesystem 0x%x", st.Type)
}

// document is BENCHMARKS.md: when and where, the table, its notes, how each
// figure is taken, and the store's Go benchmarks.
func document(cfg config, when time.Time, load string, rows []row, harnessNotes []string, gobench string) string {
	tbl, notes := table(rows)
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	fmt.Fprintf(&b, "Measured by `just bench` (`go run ./bench`) on %s. Anyone can regenerate these numbers\n", when.UTC().Format("2006-01-02 15:04 MST"))
	b.WriteString("with the same command on a clone; absolute figures follow the machine, the ratios much less.\n\n")
	for _, l := range machine(cfg, load) {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	fmt.Fprintf(&b, "- counts: %d runs per tool after %d warm-up, interleaved; %d sequential runs per tool in blocks of %d; handoff loop %d rounds of %d waiters × %d runs; queue drain %d rounds of %v waiters; idle queues of %v waiters, %s each; %d holds per tool; list %d runs\n",
		cfg.Runs, cfg.Warmup, cfg.SeqRuns, cfg.SeqBlock, cfg.LoopRounds, cfg.LoopWaiters, cfg.LoopRuns, cfg.DrainRounds, cfg.DrainSizes, cfg.IdleSizes, human(cfg.IdleWindow), cfg.Holds, cfg.ListRuns)
	fmt.Fprintf(&b, "- M1: %d bursts per tool of %d jobs of %s on %d slots\n\n", cfg.SemRounds, cfg.SemJobs, human(cfg.SemJob), cfg.SemSlots)
	b.WriteString(tbl)
	if len(notes) > 0 {
		b.WriteString("\nNot measured:\n\n")
		for i, n := range notes {
			fmt.Fprintf(&b, "%d. %s\n", i+1, strings.ReplaceAll(n, "\n", " "))
		}
	}
	b.WriteString("\n## How each figure is taken\n\n")
	for _, l := range append(method(cfg), manyMethod(cfg)...) {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	for _, n := range harnessNotes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	b.WriteString("\n## Go benchmarks of the store (for benchstat)\n\n")
	b.WriteString("```text\n" + strings.TrimRight(gobench, "\n") + "\n```\n")
	return b.String()
}

func method(cfg config) []string {
	return []string{
		"Every scenario gets fresh state directories (the file backend; flock(1) locks a file in one); fencerun and flock(1) alternate run by run, after warm-up runs that are not recorded. Spread is p10–p90 of the recorded runs; ratio is fencerun's median over the peer's.",
		"Rows marked `--cgroup off` are fencerun with that flag, interleaved in the same runs as the row above them (fencerun's default, `--cgroup auto`: as root, the command runs in a cgroup of its own) and against the same flock(1) runs.",
		"Rows marked \"against a floor\" are fencerun's same sample beside bench/floor, run in the same interleaving: a Go program of 150 lines that takes an exclusive flock of one file (waiting for it as flock(1) does), starts the command with os/exec and exits with its status, and in the hold renews every TTL/3 with the file work of fencerun's renewal (a guard's flock, four stats, the record's pread and one slot's pwrite) on a CLOCK_BOOTTIME timerfd. It has no command line parser, FIFO queue, fence, record encoding, deadline, signal forwarding, sockets or cgroup: it is what any Go wrapper pays here (the runtime's start and exit, the scheduler and sysmon around a renewal, the system calls), not a peer, so these rows have no goal.",
		"P1: wall time of the whole process, fork to wait, as the harness sees it: `fencerun --dir D run --key k -- true` against `flock D/k.lock true`; its CPU row is utime+stime from wait4 of the same runs (`true` included, for both), the fixed cost that P4's hold adds its renewals to.",
		"P1 cgroup (auto) vs `--cgroup off`: the same uncontended run, fencerun's default against fencerun with `--cgroup off` as the peer, interleaved: what containment costs a run (the cgroup's mkdir, the command's start into it, the wait for it to empty, its rmdir).",
		fmt.Sprintf("P1 throughput: %d sequential runs of `true` under a free lock per tool, one after the other as a shell loop would, in blocks of %d; the tools' blocks alternate, and each block's runs per second is one sample.", cfg.SeqRuns, cfg.SeqBlock),
		"P2 handoff: the holder's command is `sh -c 'read x < FIFO; exec stamp t_exit'`; a waiter runs `stamp t_start` under the same lock. Once the waiter is queued (fencerun: `status --json` lists its pid; flock: /proc/locks shows it blocked) and all its threads have been asleep for 5 looks 1 ms apart, the harness writes the fifo. The figure is t_start − t_exit, both CLOCK_MONOTONIC stamps taken by a static C program (bench/stamp/stamp.c) as its first act.",
		fmt.Sprintf("P2 rate: %d processes each run `true` under one lock %d times; the rate counts completions from the %dth to the %dth from last, leaving out ramp-up and drain.", cfg.LoopWaiters, cfg.LoopRuns, cfg.LoopWaiters, cfg.LoopWaiters),
		fmt.Sprintf("P2 drain: for each length n of %v, a holder whose command waits on a fifo, then n waiters of `sh -c 'echo I >> order'` (I its place in the queue) started one at a time, each seen queued and asleep (as for the handoff) before the next; then the fifo is written. The figure is the time from the holder's command's exit stamp to the last waiter's exit, as the harness sees it, over n: one handoff in a queue of n. Each row counts the commands that ran out of arrival order (flock(1) promises no order) and the waiters lost (that did not run their command or exit 0). The 500-waiter row's goal is P2's, at most 1.5x the 10-waiter row's time, both of this run.", cfg.DrainSizes),
		fmt.Sprintf("P8 idle: for each length n of %v, a holder whose command waits on a fifo and n waiters of `true` started at once, each seen queued and asleep; after a second at rest, the CPU time of every thread of every waiter (/proc/PID/task/TID/schedstat; on etcd the server's too) over %s, per second, and the mean Pss of a waiter (/proc/PID/smaps_rollup). Goals: under 1 ms a second together on files; no more than `etcdctl lock` waiters' (server included) on etcd; at most 3 MiB Pss each.", cfg.IdleSizes, human(cfg.IdleWindow)),
		"P3 (each row once for fencerun's default and once with `--cgroup off`, named in brackets): the holder runs `sh -c 'sleep 1000 & sleep 1000 & wait'`; the harness opens pidfds on the shell and both sleeps, then starts `fencerun release k --force` and polls the pidfds until all three have exited. The holder must exit 76. No peer: flock(1) has no revocation.",
		fmt.Sprintf("P4/P5: %d wrappers of each tool hold a lock at once for %s (fencerun with --ttl %s), their command `sh -c 'read x < FIFO'`. VmHWM is read from /proc/PID/status just before the command is let go; CPU is utime+stime from wait4, so it includes start-up, acquire, release and the shell (under 1 ms), as the goal does.", cfg.Holds, human(cfg.Hold), human(cfg.HoldTTL)),
		fmt.Sprintf("P6: keys are made by bench/populate, which acquires and releases each once through package filestore, leaving the free records `run --key bench-NNNNN -- true` leaves (through that CLI where bench/populate does not build; a note then says so); `list --json` must show them all. list runs with stdout to /dev/null. status of the same key runs alternately in a store of %s keys and one of %d; the goal is that it does not grow (≤ 1.5x).", thousands(cfg.Keys), cfg.FewKeys),
		fmt.Sprintf("P7 (etcd): the harness starts one etcd server of its own (Debian's /usr/bin/etcd, as the tests start theirs: one member, a data directory in its work directory, free loopback ports) and runs `fencerun --etcd URL run --key K -- CMD` (the file binary, which execs fencerun-etcd beside it, as a user's run does) against `etcdctl --endpoints URL lock K -- CMD`, Debian's etcdctl and the current one (built from the module proxy at fencerun's etcd client's version, -etcdctl), all interleaved, each scenario on a key of its own. The uncontended run and the handoff are P1's and P2's scenarios; an etcdctl waiter counts as queued once its key is under K/ beside the holder's (one key per contender), a fencerun one once `status --json` lists its pid; once asleep, each is left 200 ms more before the holder lets go, because etcd delivers a watch that starts at a revision already written (etcdctl's) only after a sync loop that runs every 100 ms: a younger etcdctl waiter is woken by that loop, some 50 ms late, not by the release (fencerun's waiter watches from the next revision and is not). The hold is P4/P5's, run after theirs on its own (each backend's hold alone, so neither's wake-ups land in the other's CPU): fencerun with --ttl %s, etcdctl with its default session TTL (10 s: its keep-alives come every 3.3 s, fencerun's every %s). The goals: wall times no slower than either etcdctl (≤ 1x), the hold's CPU at most 50 ms (P4 on etcd), peak RSS at most 20 MiB. Its hold's rows marked \"against a floor\" put fencerun's same sample beside bench/etcdfloor's, held at once with the others at fencerun's TTL: not a peer but the least a Go holder on fencerun's etcd client does (grant, the contender put, a keep-alive on a kept stream and a compare in one write every TTL/3, the deadline on CLOCK_BOOTTIME, delete and revoke; no parser, hop, side keys, watches, cgroup or signal handling: its package comment lists what it leaves out).", human(cfg.HoldTTL), human(cfg.HoldTTL/3)),
	}
}

// manyMethod says how the figures of many holders of one key (M1, M2) are
// taken.
func manyMethod(cfg config) []string {
	return []string{
		fmt.Sprintf("M1: each burst starts %[1]d runs of `fencerun --dir D run --key k --slots %[2]d --wait forever -- stamp SPANS %[3]d` back to back and waits for them all; the job is bench/stamp given a length, a static C program that reads CLOCK_MONOTONIC, sleeps until %[4]s after that (clock_nanosleep), reads it again and appends \"START END\" to SPANS, so that its own start costs well under a millisecond and the figure is the semaphore's, not the job's. Jobs per second is %[1]d over the burst's wall time (CLOCK_MONOTONIC, from just before the first fork to after the last wait); the share is the time during which %[2]d jobs ran at once, by their own stamps, over that wall time (a burst in which more than %[2]d ran at once is an error, not a figure). The ideal is what a perfect %[2]d-slot semaphore would do with the same jobs: %[2]d over the mean stamped job time (%[1]d jobs / %[2]d slots × job time, taken from the same burst), so its share would be 100%%. CPU per job is utime+stime from wait4 of every run in the burst (wrapper, its waiting and the job) over %[1]d. The flock(1) peer is the semaphore people script with it, no GNU parallel: `sh -c` trying `flock -n -E 75 k.slotI.lock JOB` on each of %[2]d lock files in turn and sleeping %[5]s s after a pass that found all busy; it runs the same bursts, interleaved burst by burst with fencerun's, %[6]d recorded per tool after one warm-up. On etcd the same bursts run `fencerun --etcd URL run --key K --slots %[2]d` against the P7 server, beside their ideal only (etcdctl has no semaphore), and their CPU per job is the wrappers' alone: the server's is not counted.", cfg.SemJobs, cfg.SemSlots, cfg.SemJob.Nanoseconds(), human(cfg.SemJob), flockPoll, cfg.SemRounds),
		"M2: a first shared holder (`fencerun run --shared --key k -- sh -c 'read x < FIFO'`, or `flock -s k.lock` the same) holds k for the whole scenario; then `fencerun --dir D run --shared --key k -- true` and `flock -s D/k.lock true` alternate run by run, as P1's uncontended runs (the same counts and warm-up), each timed fork to wait. A second shared hold that waited for the first would end only at the guard: an error, not a figure.",
	}
}
