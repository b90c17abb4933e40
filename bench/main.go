// Command bench measures fencerun against its peers and writes the table of
// BENCHMARKS.md (issue 3; CONTRACT.md P1–P8).
//
// It builds fencerun from ./cmd/fencerun (and fencerun-etcd beside it) and
// a tiny static stamp program from bench/stamp/stamp.c, then runs each
// scenario on fresh state directories of the file backend, alternating
// fencerun and flock(1) run by run after warm-up runs; for P7 it starts an
// etcd server of its own and runs fencerun --etcd against `etcdctl lock`
// (Debian's, and the current one it builds) the same way. For many
// holders of one key (issue 23) it measures M1, bursts of short jobs
// through `run --slots N` on both backends beside the ideal and beside
// flock(1) scripted as a semaphore, and M2, the start of a shared hold
// beside `flock -s` (slots.go). -only picks figures. It prints the table, with each figure's median,
// spread, ratio to the peer and goal, and writes it with the date and the
// machine to BENCHMARKS.md.
//
// It guarantees that every figure in the table was measured in this run on
// this machine, and that a figure it could not measure says why instead of
// showing a number. It does not guarantee quiet: other load on the machine
// lands in the figures, which is why runs are interleaved and medians
// reported. It needs Linux, gcc and flock(1) (util-linux); P7 needs etcd
// and etcdctl (Debian: etcd-server, etcd-client) and says it was skipped
// and why when they are missing, and the module proxy for the current
// etcdctl.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	cfg := defaultConfig()
	out := "BENCHMARKS.md"
	flag.StringVar(&cfg.Root, "root", "", "module root (default: from `go env GOMOD`)")
	flag.StringVar(&cfg.Fencerun, "fencerun", "", "fencerun binary to measure (default: build ./cmd/fencerun)")
	flag.StringVar(&cfg.Tmp, "tmp", "", "directory for the scenarios' state (default: $TMPDIR or /tmp)")
	flag.StringVar(&out, "out", out, "file to write the report to, relative to the module root; - or empty: stdout only")
	flag.IntVar(&cfg.Runs, "runs", cfg.Runs, "recorded runs per tool (P1, P2 handoff, P3, P6 status)")
	flag.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up runs per tool, not recorded")
	flag.IntVar(&cfg.LoopWaiters, "loop-waiters", cfg.LoopWaiters, "P2 rate: contending processes")
	flag.IntVar(&cfg.LoopRuns, "loop-runs", cfg.LoopRuns, "P2 rate: runs of each per round")
	flag.IntVar(&cfg.LoopRounds, "loop-rounds", cfg.LoopRounds, "P2 rate: recorded rounds per tool")
	flag.DurationVar(&cfg.Hold, "hold", cfg.Hold, "P4/P5: how long the lease is held")
	flag.DurationVar(&cfg.HoldTTL, "hold-ttl", cfg.HoldTTL, "P4/P5: the lease's TTL")
	flag.IntVar(&cfg.Holds, "holds", cfg.Holds, "P4/P5: holds per tool, at the same time")
	flag.IntVar(&cfg.Keys, "keys", cfg.Keys, "P6: keys in the large store")
	flag.IntVar(&cfg.FewKeys, "few-keys", cfg.FewKeys, "P6: keys in the small store")
	flag.IntVar(&cfg.ListRuns, "list-runs", cfg.ListRuns, "P6: recorded runs of list")
	flag.IntVar(&cfg.SeqRuns, "seq-runs", cfg.SeqRuns, "P1 throughput: sequential `run -- true` per tool")
	flag.IntVar(&cfg.SeqBlock, "seq-block", cfg.SeqBlock, "P1 throughput: runs per block; blocks of each tool alternate")
	flag.Func("drain", "P2 drain: queue lengths, comma-separated (default 10,100,500,1000)", func(v string) (err error) {
		cfg.DrainSizes, err = counts(v)
		return err
	})
	flag.IntVar(&cfg.DrainRounds, "drain-rounds", cfg.DrainRounds, "P2 drain: recorded rounds per tool and length")
	flag.Func("idle", "P8: idle queue lengths, comma-separated (default 10,100,1000)", func(v string) (err error) {
		cfg.IdleSizes, err = counts(v)
		return err
	})
	flag.DurationVar(&cfg.IdleWindow, "idle-window", cfg.IdleWindow, "P8: how long a queue at rest is measured")
	flag.IntVar(&cfg.SemJobs, "sem-jobs", cfg.SemJobs, "M1: jobs started together")
	flag.IntVar(&cfg.SemSlots, "sem-slots", cfg.SemSlots, "M1: the semaphore's slots (--slots)")
	flag.DurationVar(&cfg.SemJob, "sem-job", cfg.SemJob, "M1: how long each job sleeps")
	flag.IntVar(&cfg.SemRounds, "sem-rounds", cfg.SemRounds, "M1: recorded bursts per tool")
	flag.IntVar(&cfg.BenchCount, "bench-count", cfg.BenchCount, "-count for the store's Go benchmarks (6 for benchstat); 0 skips them")
	flag.DurationVar(&cfg.Guard, "guard", cfg.Guard, "kill any process of the harness that runs longer (a failure guard)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the work directory, to look at state and stderr files")
	only := flag.String("only", "", "measure only these figures, comma-separated (p1,…,p8, m1, m2; p4 brings p5), and print the table without writing -out unless it is given")
	flag.StringVar(&cfg.Etcdctl, "etcdctl", "", "P7: the current etcdctl to measure beside Debian's (default: build it from the module proxy at the etcd client's version; none: Debian's only)")
	flag.Parse()
	onlyGiven := false
	flag.Visit(func(f *flag.Flag) { onlyGiven = onlyGiven || f.Name == "only" })
	if onlyGiven && strings.TrimSpace(*only) == "" {
		// Not a full run that rewrites BENCHMARKS.md: -only "$UNSET" asked
		// for a part.
		fmt.Fprintln(os.Stderr, `bench: -only "" names no figure: give p1 … p8, m1 or m2, comma-separated, or leave -only out to measure all`)
		os.Exit(2)
	}
	if cfg.Etcdctl != "" && cfg.Etcdctl != "none" {
		// Refused before anything is built or measured: a missing binary
		// would only say so in P7's row, at the end of a run.
		if _, err := exec.LookPath(cfg.Etcdctl); err != nil {
			var ee *exec.Error
			if errors.As(err, &ee) {
				err = ee.Err
			}
			fmt.Fprintf(os.Stderr, "bench: -etcdctl %s: %v: give the path of an etcdctl to measure beside Debian's, or none for Debian's only\n", cfg.Etcdctl, err)
			os.Exit(2)
		}
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
		outGiven := false
		flag.Visit(func(f *flag.Flag) { outGiven = outGiven || f.Name == "out" })
		if !outGiven {
			out = "-" // a partial table never replaces the whole one unasked
		}
	}

	if err := run(cfg, out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(cfg config, out string) error {
	if cfg.Root == "" {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
			return fmt.Errorf("bench: not inside the fencerun module (go env GOMOD: %v); pass -root", err)
		}
		cfg.Root = filepath.Dir(strings.TrimSpace(string(gomod)))
	}
	// Before the builds and the runs, whose own load would be in it.
	load := loadAverage()
	h, err := newHarness(cfg)
	if err != nil {
		return err
	}
	defer h.close()
	when := time.Now()
	rows := h.measure()
	doc := document(cfg, when, load, rows, h.notes, goBench(cfg))
	fmt.Print(doc)
	if out == "" || out == "-" {
		return nil
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(cfg.Root, out)
	}
	return os.WriteFile(out, []byte(doc), 0o644)
}

// measure runs every scenario asked for (-only) in order, the long hold
// last but one so an interrupted run has the quick figures first.
func (h *harness) measure() []row {
	h.calibrate()
	var rows []row
	if h.cfg.wants("P1") {
		file := h.filePair("P1")
		rows = append(rows, h.uncontended(h.withFloor(file))...)
		rows = append(rows, h.throughput(file)...)
		// What containment costs at start and stop: the cgroup (the
		// default where one can be made) next to --cgroup off.
		contained := h.uncontended(pair{id: "P1", subj: h.fencerun, peer: h.fencerunOff, run: goal{text: "—"}})
		contained[0].figure = "uncontended `run --key k -- true`, wall time: cgroup (auto) vs `--cgroup off`"
		rows = append(rows, contained[0])
	}
	if h.cfg.wants("P2") {
		file := h.filePair("P2")
		rows = append(rows, h.handoff(h.withFloor(file))...)
		rows = append(rows, h.handoffRate(file))
		rows = append(rows, h.drains(file)...)
	}
	if h.cfg.wants("P3") {
		rows = append(rows, h.revoke(h.fencerun, atMost(0.100, seconds))...)
		rows = append(rows, h.revoke(h.fencerunOff, goal{text: "—"})...)
	}
	if h.cfg.wants("M1") {
		rows = append(rows, h.semaphore()...)
	}
	if h.cfg.wants("M2") {
		rows = append(rows, h.sharedStart()...)
	}
	var holds []holdSet
	if h.cfg.wants("P4") {
		holds = append(holds, h.fileHold())
	}
	if h.cfg.wants("P7") {
		etcd := h.etcd.pair()
		rows = append(rows, h.uncontended(etcd)...)
		rows = append(rows, h.handoff(etcd)...)
		holds = append(holds, h.etcdHold(h.etcd))
	}
	// Each backend's hold runs on its own: P4 is one hold's cost, and
	// measured beside P7's wrappers and their etcd server it read 29.4 ms
	// against 24.9 ms alone (13:53 UTC, load 0.3-0.8): their wake-ups
	// cool each other's caches. It costs the bench one more Hold.
	for _, set := range holds {
		rows = append(rows, h.hold(set)...)
	}
	if h.cfg.wants("P6") {
		rows = append(rows, h.keys()...)
	}
	if h.cfg.wants("P8") {
		rows = append(rows, h.idle(h.filePair("P8"), nil, atMost(0.001, seconds))...)
		e := h.etcd
		rows = append(rows, h.idle(e.pair(), e.serverPid, ratioAtMost(1))...)
	}
	return rows
}

// counts parses a comma-separated list of counts.
func counts(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// goBench runs the store's Go benchmarks and returns their output for
// benchstat, or why they did not run.
func goBench(cfg config) string {
	if cfg.BenchCount == 0 {
		return "not run (-bench-count 0)"
	}
	if _, err := os.Stat(filepath.Join(cfg.Root, "store", "filestore")); err != nil {
		return "not run: store/filestore does not exist yet"
	}
	fmt.Fprintln(os.Stderr, "bench: go test -bench ./store/filestore/")
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", strconv.Itoa(cfg.BenchCount), "./store/filestore/")
	cmd.Dir = cfg.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go test -bench failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Benchmark") {
		return "store/filestore has no benchmarks yet\n" + string(out)
	}
	return string(out)
}
