package main

import (
	"debug/elf"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// config holds every count and duration of a run. The defaults are the full
// run behind BENCHMARKS.md; the smoke test shrinks them.
type config struct {
	Root     string // module root: where cmd/fencerun and store/filestore live
	Fencerun string // a fencerun binary to measure; empty: build ./cmd/fencerun
	Tmp      string // where each scenario's fresh state directory is made

	Runs        int           // recorded runs per tool: P1, P2 handoff, P3, P6 status
	Warmup      int           // runs per tool before those, not recorded
	LoopWaiters int           // P2 rate: processes contending in a loop
	LoopRuns    int           // P2 rate: runs of each of them per round
	LoopRounds  int           // P2 rate: recorded rounds per tool
	Hold        time.Duration // P4/P5: how long the lease is held
	HoldTTL     time.Duration // P4/P5: its TTL
	Holds       int           // P4/P5: holds per tool, all at the same time
	Keys        int           // P6: keys in the large store
	FewKeys     int           // P6: keys in the small store
	ListRuns    int           // P6: recorded runs of list
	SeqRuns     int           // P1 throughput: sequential runs per tool
	SeqBlock    int           // P1 throughput: runs per block, blocks of each tool alternating
	DrainSizes  []int         // P2 drain: queue lengths, waiters behind one holder
	DrainRounds int           // P2 drain: recorded rounds per tool and length
	IdleSizes   []int         // P8: queue lengths at rest
	IdleWindow  time.Duration // P8: how long a queue at rest is measured
	BenchCount  int           // -count of the store's Go benchmarks; 0 skips them
	SemJobs     int           // M1: jobs started together
	SemSlots    int           // M1: the semaphore's slots (--slots)
	SemJob      time.Duration // M1: how long each job sleeps
	SemRounds   int           // M1: recorded bursts per tool
	Guard       time.Duration // a process that runs longer is killed: a failure guard, never a measure
	Keep        bool          // keep the work directory
	// Only names the figures to measure (p1 … p8, m1, m2; p4 brings p5);
	// empty: all of them.
	Only []string
	// Etcdctl is the current etcdctl for P7 beside Debian's: empty, build
	// it from the module proxy; "none", measure Debian's only.
	Etcdctl string
}

// wants says whether figure id (P1 … P8, M1, M2) is to be measured.
func (c config) wants(id string) bool {
	if len(c.Only) == 0 {
		return true
	}
	if id == "P5" {
		id = "P4" // one hold measures both
	}
	for _, o := range c.Only {
		if strings.EqualFold(o, id) {
			return true
		}
	}
	return false
}

func defaultConfig() config {
	return config{
		Runs:        30,
		Warmup:      3,
		LoopWaiters: 8,
		LoopRuns:    25,
		LoopRounds:  5,
		Hold:        60 * time.Second,
		HoldTTL:     3 * time.Second,
		Holds:       3,
		Keys:        10000,
		FewKeys:     10,
		ListRuns:    10,
		SeqRuns:     1000,
		SeqBlock:    100,
		DrainSizes:  []int{10, 100, 500, 1000},
		DrainRounds: 3,
		IdleSizes:   []int{10, 100, 1000},
		IdleWindow:  5 * time.Second,
		SemJobs:     40,
		SemSlots:    4,
		SemJob:      50 * time.Millisecond,
		SemRounds:   10,
		BenchCount:  1, // each -count costs ~45 s here: BenchmarkList10000 makes its 10,000 keys anew
		Guard:       30 * time.Second,
	}
}

func (c config) validate() error {
	switch {
	case c.Runs < 1 || c.Warmup < 0 || c.ListRuns < 1 || c.LoopRounds < 1 || c.Holds < 1:
		return errors.New("bench: counts must be at least 1 (warmup at least 0)")
	case c.SeqRuns < 1 || c.SeqBlock < 1 || c.DrainRounds < 1:
		return errors.New("bench: throughput runs, their block and drain rounds must be at least 1")
	case len(c.DrainSizes) == 0 || slices.Min(c.DrainSizes) < 1 || len(c.IdleSizes) == 0 || slices.Min(c.IdleSizes) < 1:
		return errors.New("bench: the queue drain and the idle queue need lengths of at least 1 waiter")
	case c.IdleWindow <= 0:
		return errors.New("bench: the idle window must be positive")
	case c.LoopWaiters < 2:
		return errors.New("bench: the handoff loop needs at least 2 waiters")
	case c.LoopRuns < 3:
		return errors.New("bench: the handoff loop needs at least 3 runs per waiter, to leave out its ramp-up and drain")
	case c.FewKeys < 1 || c.Keys < c.FewKeys:
		return errors.New("bench: keys must be at least few-keys, which must be at least 1")
	case c.HoldTTL < time.Second:
		return errors.New("bench: the hold TTL must be at least 1s, as for fencerun")
	case c.Guard <= 0:
		return errors.New("bench: the guard must be positive")
	case c.SemJobs < 1 || c.SemRounds < 1 || c.SemJob <= 0:
		return errors.New("bench: the semaphore needs at least 1 job of a positive length and 1 round")
	case c.SemSlots < 1 || c.SemSlots > 1024:
		return errors.New("bench: the semaphore's slots must be 1 to 1024, as --slots")
	case c.wants("P7") && c.HoldTTL < 2*time.Second:
		return errors.New("bench: P7 needs a hold TTL of at least 2s, etcd's shortest lease")
	}
	for _, o := range c.Only {
		p := len(o) == 2 && (o[0] == 'p' || o[0] == 'P') && o[1] >= '1' && o[1] <= '8'
		m := len(o) == 2 && (o[0] == 'm' || o[0] == 'M') && o[1] >= '1' && o[1] <= '2'
		if !p && !m {
			return fmt.Errorf("bench: -only %q: figures are p1 … p8, m1 and m2", o)
		}
	}
	return nil
}

//go:embed stamp/stamp.c
var stampSource []byte

// harness is one run: its work directory, the programs it measures and the
// helpers it built.
type harness struct {
	cfg      config
	work     string
	env      []string // the environment minus FENCERUN_*, so no setting of the caller's leaks in
	stamp    string   // path of the stamp program, "" when it could not be built
	stampErr error
	fencerun *tool
	// fencerunOff is fencerun without a cgroup (--cgroup off): what the
	// containment costs is fencerun's figures next to its.
	fencerunOff *tool
	flock       *tool
	// M1 and M2: fencerun --slots SemSlots and the flock(1) script of as
	// many lock files; fencerun --shared and flock -s.
	fencerunSlots, flockSlots   *tool
	fencerunShared, flockShared *tool
	floor                       *tool      // bench/floor: the least a Go wrapper does (pair.floor)
	populate                    string     // path of the populate program; "" when it did not build
	etcd                        *etcdBench // P7's server and tools; nil when P7 is not measured

	notes []string // said under the table: how figures were taken, what went wrong
}

func newHarness(cfg config) (*harness, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(cfg.Tmp, "fencerun-bench-")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(work, "stderr"), 0o700); err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, work: work}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCERUN_") {
			h.env = append(h.env, kv)
		}
	}

	h.stamp, h.stampErr = h.buildStamp()

	bin, err := h.buildFencerun()
	if err == nil {
		h.notes = append(h.notes, measuredBinary(bin, cfg.Fencerun != ""))
	}
	h.fencerun = h.fencerunTool(bin, err)
	h.fencerunOff = h.fencerunTool(bin, err, "--cgroup", "off")
	if err == nil {
		h.populate = h.buildPopulate()
	}

	flockBin, err := exec.LookPath("flock")
	if err != nil {
		err = fmt.Errorf("flock(1) not found (Debian: apt-get install util-linux): %w", err)
	}
	h.flock = h.flockTool(flockBin, err)
	h.fencerunSlots = h.fencerunTool(bin, h.fencerun.err, h.slotsFlags()...)
	h.flockSlots = h.flockSemTool(flockBin, err)
	h.fencerunShared = h.fencerunTool(bin, h.fencerun.err, "--shared")
	h.flockShared = h.flockSharedTool(flockBin, err)
	h.floor = h.floorTool(h.buildFloor())
	if cfg.wants("P7") || cfg.wants("P8") || cfg.wants("M1") {
		h.etcd = h.startEtcd(bin, h.fencerun.err)
	}
	return h, nil
}

func (h *harness) close() {
	if h.etcd != nil {
		h.etcd.close()
	}
	if h.cfg.Keep {
		fmt.Fprintf(os.Stderr, "bench: kept %s\n", h.work)
		return
	}
	fmt.Fprintf(os.Stderr, "bench: removing %s\n", h.work)
	_ = os.RemoveAll(h.work)
}

// buildStamp compiles stamp.c without libc where it can (the fastest to
// start), else statically against libc (no dynamic loader), else as gcc
// manages. The table's notes say which.
func (h *harness) buildStamp() (string, error) {
	src := filepath.Join(h.work, "stamp.c")
	bin := filepath.Join(h.work, "stamp")
	if err := os.WriteFile(src, stampSource, 0o600); err != nil {
		return "", err
	}
	builds := []struct {
		name  string
		flags []string
	}{
		{"static, without libc", []string{"-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector", "-DSTAMP_NOLIBC"}},
		{"static against libc", []string{"-static"}},
		{"dynamic", nil},
	}
	var failed []string
	for _, b := range builds {
		args := append(append([]string{"-O2"}, b.flags...), "-o", bin, src)
		out, err := exec.Command("gcc", args...).CombinedOutput()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %s", b.name, firstLine(out)))
			continue
		}
		// A build that links but cannot run (say, the no-libc start-up on
		// an unexpected ABI) is no better than one that fails.
		probe := filepath.Join(h.work, "stamp-probe")
		if out, err := exec.Command(bin, probe).CombinedOutput(); err != nil {
			failed = append(failed, fmt.Sprintf("%s: built but does not run: %v %s", b.name, err, firstLine(out)))
			continue
		}
		if _, err := readStamp(probe); err != nil {
			failed = append(failed, fmt.Sprintf("%s: built but wrote no stamp: %v", b.name, err))
			continue
		}
		if err := probeJob(bin, probe+"-job"); err != nil {
			failed = append(failed, fmt.Sprintf("%s: built but its job form fails: %v", b.name, err))
			continue
		}
		note := "The stamp program was built " + b.name + "."
		if len(failed) > 0 {
			note += " Builds tried first failed: " + strings.Join(failed, "; ")
		}
		h.notes = append(h.notes, note)
		return bin, nil
	}
	return "", fmt.Errorf("gcc could not build the stamp program: %s", strings.Join(failed, "; "))
}

func (h *harness) buildFencerun() (string, error) {
	if h.cfg.Fencerun != "" {
		if _, err := os.Stat(h.cfg.Fencerun); err != nil {
			return "", err
		}
		return h.cfg.Fencerun, nil
	}
	return h.buildStatic("./cmd/fencerun", "fencerun")
}

// measuredBinary says which fencerun binary the figures are of and how it
// is linked, read from its ELF program headers: a dynamically linked one
// (go build where a C compiler is, without CGO_ENABLED=0) pays the loader
// at every start, so its figures are not those of the binary README's
// install and just build make (static).
func measuredBinary(bin string, given bool) string {
	name, how := "fencerun", "built here with CGO_ENABLED=0 go build, as README's install and just build make it"
	if given {
		name, how = bin, "given with -fencerun"
	}
	link := "linkage unknown"
	if f, err := elf.Open(bin); err == nil {
		link = "statically linked"
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				link = "dynamically linked (it pays the dynamic loader at every start)"
			}
		}
		f.Close()
	}
	return fmt.Sprintf("fencerun measured: %s, %s; %s.", name, how, link)
}

// buildFloor builds bench/floor, as fencerun is built.
func (h *harness) buildFloor() (string, error) {
	return h.buildStatic("./bench/floor", "floor")
}

// buildStatic builds the package pkg of the module into the work
// directory as name, with flags given to go build. Static, as just build makes fencerun: with a C
// compiler at hand go build links libc for package net, and the dynamic
// loader costs every start about 0.8 ms of CPU here (go run ./bench
// outside just bench).
func (h *harness) buildStatic(pkg, name string, flags ...string) (string, error) {
	bin := filepath.Join(h.work, name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), pkg)...)
	cmd.Dir = h.cfg.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s does not build: %s", pkg, firstLine(out))
	}
	return bin, nil
}

// buildPopulate builds the program that makes P6's keys through package
// filestore; where it does not build, the keys are made through the CLI,
// which is slower but says the same.
func (h *harness) buildPopulate() string {
	bin := filepath.Join(h.work, "populate")
	cmd := exec.Command("go", "build", "-o", bin, "./bench/populate")
	cmd.Dir = h.cfg.Root
	if out, err := cmd.CombinedOutput(); err != nil {
		h.notes = append(h.notes, "P6 keys were made through the CLI: ./bench/populate does not build: "+firstLine(out))
		return ""
	}
	return bin
}

// scenarioDir makes a fresh directory for one scenario of one tool: the
// state root the tool is given (0700, as fencerun requires), and beside it,
// never inside it, the harness's own fifos and stamp files.
func (h *harness) scenarioDir(name string) (lockSpec, error) {
	files, err := os.MkdirTemp(h.work, name+"-")
	if err != nil {
		return lockSpec{}, err
	}
	state := filepath.Join(files, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		return lockSpec{}, err
	}
	return lockSpec{dir: state, files: files, key: "k"}, nil
}

// firstLine is the first line of a tool's output that says something,
// skipping go build's "# package" headers.
func firstLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "# ") && i+1 < len(lines) {
			continue
		}
		if i+1 < len(lines) {
			l += " …"
		}
		return strings.TrimSpace(l)
	}
	return ""
}
