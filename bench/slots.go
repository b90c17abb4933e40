package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Many holders of one key (issue 23): M1, the throughput of a --slots
// semaphore under a burst of short jobs, each job stamping its own start
// and end, beside the best any semaphore of that many slots could do and
// beside flock(1) scripted as one; M2, the start of a shared hold while
// another shared holder holds the key, beside `flock -s`.

// flockPoll is how long the flock(1) semaphore script sleeps after a pass
// that found every lock file busy: the tenth of a second such scripts
// commonly sleep (a second is as common, and slower still).
const flockPoll = "0.1"

// flockSemScript is a semaphore the way people script one with flock(1):
// each of n lock files in turn with -n, the job under the first that is
// free, and a sleep before the next pass when all were busy. -E 75 tells a
// busy lock from the job's own exit status. Arguments: flock's path, the
// lock files' prefix, n, the sleep, then the job.
const flockSemScript = `flock=$1 prefix=$2 n=$3 poll=$4; shift 4
while :; do
	i=0
	while [ $i -lt $n ]; do
		"$flock" -n -E 75 "$prefix.slot$i.lock" "$@"; rc=$?
		[ $rc -ne 75 ] && exit $rc
		i=$((i + 1))
	done
	sleep "$poll"
done`

// slotsFlags are fencerun's run flags in M1: SemSlots slots, waiting as
// long as it takes (the default for a key, said as the brief of issue 23
// says it).
func (h *harness) slotsFlags() []string {
	return []string{"--slots", strconv.Itoa(h.cfg.SemSlots), "--wait", "forever"}
}

// probeJob checks that the stamp program at bin runs as M1's job: one
// line, its end after its start.
func probeJob(bin, path string) error {
	if out, err := exec.Command(bin, path, "1000").CombinedOutput(); err != nil {
		return fmt.Errorf("%v %s", err, firstLine(out))
	}
	spans, err := readSpans(path)
	if err == nil && len(spans) != 1 {
		err = fmt.Errorf("%d lines, want 1", len(spans))
	}
	return err
}

// flockSemTool is flockSemScript over SemSlots lock files beside l's key.
func (h *harness) flockSemTool(bin string, lookErr error) *tool {
	n := h.cfg.SemSlots
	t := &tool{name: fmt.Sprintf("flock(1) -n over %d lock files, polling", n), err: lookErr}
	t.argv = func(l lockSpec, cmd ...string) []string {
		return append([]string{"sh", "-c", flockSemScript, "sh", bin, filepath.Join(l.dir, l.key), strconv.Itoa(n), flockPoll}, cmd...)
	}
	return t
}

// flockSharedTool is `flock -s FILE CMD`.
func (h *harness) flockSharedTool(bin string, lookErr error) *tool {
	t := &tool{name: "flock(1) -s", err: lookErr}
	t.argv = func(l lockSpec, cmd ...string) []string {
		return append([]string{bin, "-s", filepath.Join(l.dir, l.key+".lock")}, cmd...)
	}
	return t
}

// span is one job's run: its CLOCK_MONOTONIC start and end, nanoseconds.
type span struct{ start, end int64 }

// burst is what one burst of SemJobs jobs through one tool took.
type burst struct {
	rate  float64 // jobs per second over the burst's wall time
	busy  float64 // share of that wall time during which every slot ran a job
	ideal float64 // jobs per second of a perfect semaphore: slots / mean job time
	cpu   float64 // CPU seconds per job: wrapper, its waiting and the job
}

// semSamples are one tool's samples in M1; nil where its rows have none.
type semSamples struct{ rate, busy, ideal, cpu *sample }

// semaphore is M1: rounds of SemJobs `--slots SemSlots` runs started
// together, on files beside the flock(1) script and the ideal, and on etcd
// beside the ideal.
func (h *harness) semaphore() []row {
	c := h.cfg
	what := fmt.Sprintf("`run --slots %d`, %d jobs of %s started together", c.SemSlots, c.SemJobs, human(c.SemJob))
	ideal := fmt.Sprintf("ideal: %d jobs / %d slots × job time", c.SemJobs, c.SemSlots)
	busyWhat := fmt.Sprintf(": share of the wall time all %d slots ran a job", c.SemSlots)
	flockName := h.flockSlots.name
	rate := newRow("M1", what+": jobs per second", perSec, ideal, goal{text: "—"})
	vsFlock := newRow("M1", what+": jobs per second", perSec, flockName, goal{text: "—"})
	vsFlock.subj = rate.subj
	busy := newRow("M1", what+busyWhat, share, flockName, goal{text: "—"})
	cpuWhat := ": CPU per job (wrapper, its waiting and the job)"
	cpu := newRow("M1", what+cpuWhat, seconds, flockName, goal{text: "—"})
	rows := []row{rate, vsFlock, busy, cpu}
	tools := []*tool{h.fencerunSlots, h.flockSlots}
	sets := []semSamples{{rate.subj, busy.subj, rate.peer, cpu.subj}, {vsFlock.peer, busy.peer, nil, cpu.peer}}
	if h.etcd != nil {
		eRate := newRow("M1", what+" on etcd: jobs per second", perSec, ideal, goal{text: "—"})
		eBusy := newRow("M1", what+" on etcd"+busyWhat, share, "", goal{text: "—"})
		eCPU := newRow("M1", what+" on etcd"+cpuWhat+", the server's not counted", seconds, "", goal{text: "—"})
		rows = append(rows, eRate, eBusy, eCPU)
		tools = append(tools, h.etcd.slots)
		sets = append(sets, semSamples{eRate.subj, eBusy.subj, eRate.peer, eCPU.subj})
	}
	h.progress("M1 semaphore, %d jobs on %d slots, %s", c.SemJobs, c.SemSlots, names(tools))
	rates := make([]*sample, len(sets))
	for j, s := range sets {
		rates[j] = s.rate
	}
	specs := h.specs("m1-slots", tools, rates)
	interleave(tools, rates, min(c.Warmup, 1), c.SemRounds, func(j int, t *tool, rec bool) (float64, error) {
		b, err := h.burstOnce(t, specs[j])
		if err == nil && rec {
			for _, x := range []struct {
				s *sample
				v float64
			}{{sets[j].busy, b.busy}, {sets[j].ideal, b.ideal}, {sets[j].cpu, b.cpu}} {
				if x.s != nil {
					x.s.add(x.v)
				}
			}
		}
		return b.rate, err
	})
	for _, s := range sets {
		for _, side := range []*sample{s.busy, s.ideal, s.cpu} {
			if side != nil && s.rate.err != nil {
				side.fail(s.rate.err)
			}
		}
	}
	return rows
}

// burstOnce starts SemJobs runs of t on l at once, each job
// `stamp SPANS NS` (a static C program that sleeps SemJob and appends its
// start and end), waits for them all, and reads the spans back. More jobs
// at once than slots is an error, not a figure.
func (h *harness) burstOnce(t *tool, l lockSpec) (burst, error) {
	c := h.cfg
	if h.stampErr != nil {
		return burst{}, h.stampErr
	}
	spans := filepath.Join(l.files, "spans")
	if err := os.Remove(spans); err != nil && !errors.Is(err, os.ErrNotExist) {
		return burst{}, err
	}
	job := []string{h.stamp, spans, strconv.FormatInt(c.SemJob.Nanoseconds(), 10)}
	// A slow burst queues long: the guard grows with it.
	queueing := time.Duration(c.SemJobs) * (c.SemJob + 100*time.Millisecond)
	t0, err := monotonic()
	if err != nil {
		return burst{}, err
	}
	var first error
	procs := make([]*proc, 0, c.SemJobs)
	for range c.SemJobs {
		p, err := h.startFor(t.argv(l, job...), queueing)
		if err != nil {
			first = err
			break
		}
		procs = append(procs, p)
	}
	var cpu time.Duration
	for _, p := range procs {
		if err := p.wait(0); err != nil && first == nil {
			first = err
		}
		cpu += cpuTime(p.cmd.ProcessState)
	}
	t1, err := monotonic()
	if err := errors.Join(first, err); err != nil {
		return burst{}, err
	}
	got, err := readSpans(spans)
	if err != nil {
		return burst{}, err
	}
	if len(got) != c.SemJobs {
		return burst{}, fmt.Errorf("%d of %d jobs stamped their run", len(got), c.SemJobs)
	}
	full, most := allBusy(got, c.SemSlots)
	if most > c.SemSlots {
		return burst{}, fmt.Errorf("%d jobs ran at once on %d slots: the semaphore let too many in", most, c.SemSlots)
	}
	var ran int64
	for _, s := range got {
		ran += s.end - s.start
	}
	wall := float64(t1 - t0)
	return burst{
		rate:  float64(c.SemJobs) / wall * 1e9,
		busy:  float64(full) / wall,
		ideal: float64(c.SemSlots*c.SemJobs) / float64(ran) * 1e9,
		cpu:   cpu.Seconds() / float64(c.SemJobs),
	}, nil
}

// allBusy returns how long at least n of spans ran at once, in
// nanoseconds, and the most that ran at once. A span that ends when
// another starts does not overlap it.
func allBusy(spans []span, n int) (full int64, most int) {
	type edge struct {
		at   int64
		step int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.step, b.step))
	})
	running := 0
	for i, e := range edges {
		if running >= n {
			full += e.at - edges[i-1].at
		}
		running += e.step
		most = max(most, running)
	}
	return full, most
}

// readSpans reads the "START END" lines the jobs appended to path.
func readSpans(path string) ([]span, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var spans []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s span
		a, b, ok := strings.Cut(sc.Text(), " ")
		if ok {
			s.start, err = strconv.ParseInt(a, 10, 64)
			if err == nil {
				s.end, err = strconv.ParseInt(b, 10, 64)
			}
		}
		if !ok || err != nil || s.end < s.start {
			return nil, fmt.Errorf("%s: %q is not a job's start and end", filepath.Base(path), sc.Text())
		}
		spans = append(spans, s)
	}
	return spans, sc.Err()
}

// monotonic is CLOCK_MONOTONIC now, in nanoseconds: the stamps' clock.
func monotonic() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return ts.Nano(), nil
}

// sharedStart is M2: the wall time of `run --shared -- true` while a
// first shared holder holds the key (its command blocked on a fifo for the
// whole interleaving), beside `flock -s` the same way, as P1's
// uncontended run is taken.
func (h *harness) sharedStart() []row {
	tools := []*tool{h.fencerunShared, h.flockShared}
	h.progress("M2 shared start beside a shared holder, %s", names(tools))
	r := newRow("M2", "`run --shared --key k -- true` while another shared holder holds k, wall time", seconds, h.flockShared.name, goal{text: "—"})
	samples := []*sample{r.subj, r.peer}
	if h.stampErr != nil {
		for _, s := range samples {
			s.fail(h.stampErr)
		}
		return []row{r}
	}
	specs := h.specs("m2-shared", tools, samples)
	type held struct {
		p *proc
		w *os.File
	}
	holders := make([]*held, len(tools))
	for j, t := range tools {
		if t.err != nil || samples[j].err != nil {
			continue
		}
		exitStamp := filepath.Join(specs[j].files, "t_exit")
		d := time.Duration(h.cfg.Warmup+h.cfg.Runs) * time.Second
		p, w, err := h.startFIFOHolder(t, specs[j], filepath.Join(specs[j].files, "go"), exitStamp, d)
		if err != nil {
			samples[j].fail(fmt.Errorf("the first shared holder: %w", err))
			continue
		}
		holders[j] = &held{p, w}
	}
	interleave(tools, samples, h.cfg.Warmup, h.cfg.Runs, func(j int, t *tool, _ bool) (float64, error) {
		r, err := h.runTimed(t.argv(specs[j], "true"), 0)
		return r.wall.Seconds(), err
	})
	for j, x := range holders {
		if x == nil {
			continue
		}
		_, werr := x.w.WriteString("\n")
		if err := errors.Join(werr, x.w.Close(), x.p.wait(0)); err != nil {
			samples[j].fail(fmt.Errorf("the first shared holder: %w", err))
		}
	}
	return []row{r}
}
