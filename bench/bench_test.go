package main

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

func TestQuantile(t *testing.T) {
	tests := []struct {
		vals []float64
		q    float64
		want float64
	}{
		{[]float64{3, 1, 2}, 0.5, 2},
		{[]float64{4, 1, 3, 2}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.1, 2},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9, 10},
		{[]float64{5}, 0.9, 5},
		{[]float64{1, 2}, 0.1, 1.1},
	}
	for _, tt := range tests {
		s := sample{vals: tt.vals}
		if got := s.quantile(tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("quantile(%v, %v) = %v, want %v", tt.vals, tt.q, got, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		u    unit
		v    float64
		want string
	}{
		{seconds, 0.000412, "412 µs"},
		{seconds, 0.00123, "1.23 ms"},
		{seconds, 0.0456, "45.6 ms"},
		{seconds, 2.5, "2.50 s"},
		{bytes, 7.5 * (1 << 20), "7.5 MiB"},
		{perSec, 612.4, "612/s"},
		{share, 0.8734, "87.3%"},
		{seconds, math.NaN(), "—"},
	}
	for _, tt := range tests {
		if got := tt.u.format(tt.v); got != tt.want {
			t.Errorf("format(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestVerdict(t *testing.T) {
	measured := func(v ...float64) *sample { return &sample{vals: v} }
	failed := &sample{err: errors.New("fencerun does not build")}
	tests := []struct {
		name string
		r    row
		want string
	}{
		{"ratio met", row{subj: measured(2), peer: measured(1), goal: ratioAtMost(2)}, "yes"},
		{"ratio missed", row{subj: measured(2.1), peer: measured(1), goal: ratioAtMost(2)}, "**no**"},
		{"limit met", row{subj: measured(0.09), goal: atMost(0.1, seconds)}, "yes"},
		{"limit missed", row{subj: measured(0.2), goal: atMost(0.1, seconds)}, "**no**"},
		{"subject not measured", row{subj: failed, goal: atMost(0.1, seconds)}, "unknown"},
		{"peer not measured", row{subj: measured(1), peer: failed, goal: ratioAtMost(2)}, "unknown"},
		{"no goal", row{subj: measured(1), peer: measured(1), goal: goal{text: "—"}}, "—"},
	}
	for _, tt := range tests {
		if got := tt.r.verdict(); got != tt.want {
			t.Errorf("%s: verdict = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestTableSaysWhyOnce(t *testing.T) {
	err := errors.New("./cmd/fencerun does not build: undefined: filestore.Open")
	rows := []row{
		newRow("P1", "a", seconds, "flock(1)", ratioAtMost(2)),
		newRow("P3", "b", seconds, "", atMost(0.1, seconds)),
	}
	rows[0].subj.fail(err)
	rows[0].peer.add(0.001)
	rows[1].subj.fail(err)
	tbl, notes := table(rows)
	if len(notes) != 1 || notes[0] != err.Error() {
		t.Errorf("notes = %q, want the one build error", notes)
	}
	if n := strings.Count(tbl, "not measured [1]"); n != 2 {
		t.Errorf("table points at note 1 %d times, want 2:\n%s", n, tbl)
	}
}

// smokeConfig is the full harness at the smallest counts that still take
// every path: a few seconds, and no figure in it means anything.
func smokeConfig(t *testing.T) config {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return config{
		Root: root, Tmp: t.TempDir(),
		Runs: 3, Warmup: 1,
		LoopWaiters: 3, LoopRuns: 3, LoopRounds: 1,
		Hold: 500 * time.Millisecond, HoldTTL: 2 * time.Second, Holds: 1, // 2 s: etcd's shortest lease
		Keys: 20, FewKeys: 4, ListRuns: 2,
		SeqRuns: 4, SeqBlock: 2, DrainSizes: []int{2, 3}, DrainRounds: 1,
		IdleSizes: []int{2}, IdleWindow: 200 * time.Millisecond,
		SemJobs: 6, SemSlots: 2, SemJob: 20 * time.Millisecond, SemRounds: 1,
		Guard: 30 * time.Second,
		// Debian's etcdctl only: building the current one needs the
		// module proxy and a minute; `go run ./bench -only p7` does it.
		Etcdctl: "none",
	}
}

// TestSmoke runs the whole harness with tiny counts and checks the table has
// every row with sane values: flock(1)'s always, fencerun's whenever
// ./cmd/fencerun builds, P7's (fencerun --etcd and etcdctl lock) whenever
// an etcd server is installed or FENCERUN_REQUIRE_ETCD asks for one. It
// asserts nothing about timing.
func TestSmoke(t *testing.T) {
	cfg := smokeConfig(t)
	h, err := newHarness(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if h.stampErr != nil {
		t.Fatalf("stamp: %v", h.stampErr)
	}
	if h.flock.err != nil {
		t.Fatalf("flock: %v", h.flock.err)
	}
	rows := h.measure()
	doc := document(cfg, time.Now(), loadAverage(), rows, h.notes, "not run")
	t.Log("\n" + doc)

	// fencerun's rows, each beside its --cgroup off row where it has one,
	// and P1's cgroup against --cgroup off; P7's quick rows after P3, its
	// hold's after P4/P5's.
	// P1's wall and CPU rows, P2's handoff and P4/P5's hold have a row
	// against the floor (bench/floor) each, and P7's hold's CPU and peak
	// RSS against bench/etcdfloor.
	// M1 has four rows on files and three on etcd, M2 one.
	wantIDs := []string{"P1", "P1", "P1", "P1", "P1", "P1", "P1", "P1", "P1", "P2", "P2", "P2", "P2", "P2", "P2", "P3", "P3", "P3", "P3",
		"M1", "M1", "M1", "M1", "M1", "M1", "M1", "M2", "P7", "P7", "P7", "P4", "P4", "P4", "P5", "P5", "P5", "P7", "P7", "P7", "P7", "P6", "P6", "P8", "P8", "P8", "P8"}
	var gotIDs []string
	for _, r := range rows {
		gotIDs = append(gotIDs, r.id)
	}
	if strings.Join(gotIDs, " ") != strings.Join(wantIDs, " ") {
		t.Fatalf("rows %v, want %v", gotIDs, wantIDs)
	}
	etcdFloors := 0
	for _, r := range rows {
		if r.id == "P7" && strings.Contains(r.figure, "against a floor") {
			etcdFloors++
			if r.goal.met != nil || r.peerName != h.etcd.floor.name {
				t.Errorf("P7 floor row %s against %q with goal %q: want bench/etcdfloor, with no goal", r.figure, r.peerName, r.goal.text)
			}
		}
	}
	if etcdFloors != 2 {
		t.Errorf("%d P7 rows against a floor, want 2 (the hold's CPU and peak RSS)", etcdFloors)
	}
	for _, r := range rows {
		if !strings.Contains(doc, "| "+r.id+" "+r.figure+" |") {
			t.Errorf("table has no row %s %s", r.id, r.figure)
		}
		if r.peer != nil && (r.peerName == h.flock.name || r.peerName == h.floor.name) {
			checkSane(t, r.id+" "+r.figure+" ("+r.peerName+")", r.peer)
		}
	}
	if h.fencerun.err != nil {
		t.Logf("fencerun rows not checked: %v", h.fencerun.err)
		for _, r := range rows {
			if r.subj.err == nil {
				t.Errorf("%s %s: measured although fencerun did not build", r.id, r.figure)
			}
		}
		return
	}
	noEtcd := etcdtest.Binary() == "" && os.Getenv("FENCERUN_REQUIRE_ETCD") == ""
	for _, r := range rows {
		if (r.id == "P7" || strings.Contains(r.figure, "on etcd")) && noEtcd {
			if r.subj.err == nil || !strings.Contains(r.subj.err.Error(), "P7 skipped") {
				t.Errorf("%s %s without an etcd server: %v, want it said skipped", r.id, r.figure, r.subj.err)
			}
			continue
		}
		checkSane(t, r.id+" "+r.figure, r.subj)
		if r.peer != nil {
			checkSane(t, r.id+" "+r.figure+" (peer)", r.peer)
		}
		if r.goal.met != nil && r.verdict() == "unknown" {
			t.Errorf("%s %s: no verdict although measured", r.id, r.figure)
		}
	}
}

func checkSane(t *testing.T, name string, s *sample) {
	t.Helper()
	if !s.ok() {
		t.Errorf("%s: not measured: %v", name, s.err)
		return
	}
	// A queue at rest may use no CPU at all (P8), and a tiny burst may
	// never fill every slot at once (M1): their figures may be 0.
	atRest := strings.Contains(name, "at rest: CPU") || strings.Contains(name, "slots ran a job")
	for _, v := range s.vals {
		if !(v > 0 || atRest && v == 0) || math.IsInf(v, 0) {
			t.Errorf("%s: value %v, want positive and finite", name, v)
		}
	}
}

// TestHandoffNeedsALock: a "tool" that locks nothing lets the waiter run at
// once; the harness must report that, not time it.
func TestHandoffNeedsALock(t *testing.T) {
	h, err := newHarness(smokeConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if h.stampErr != nil {
		t.Fatalf("stamp: %v", h.stampErr)
	}
	none := &tool{
		name:   "no lock",
		argv:   func(_ lockSpec, cmd ...string) []string { return cmd },
		queued: func(lockSpec, int, int) (bool, error) { return false, nil },
	}
	l, err := h.scenarioDir("none")
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.handoffOnce(none, l)
	if err == nil || !strings.Contains(err.Error(), "before the holder let go") {
		t.Fatalf("handoff without a lock = %v, %v; want the waiter reported as running early", v, err)
	}
}

func TestInterleave(t *testing.T) {
	a, b := &tool{name: "a"}, &tool{name: "b"}
	var sa, sb sample
	var order []string
	var recs []bool
	interleave([]*tool{a, b}, []*sample{&sa, &sb}, 1, 2, func(j int, tl *tool, rec bool) (float64, error) {
		order = append(order, tl.name)
		recs = append(recs, rec)
		if tl == b && len(order) == 4 {
			return 0, errors.New("b broke")
		}
		return float64(len(order)), nil
	})
	if got := strings.Join(order, " "); got != "a b a b a" {
		t.Errorf("order %q, want a b a b a: alternating, b not run after it failed", got)
	}
	if want := []bool{false, false, true, true, true}; !slices.Equal(recs, want) {
		t.Errorf("rec %v, want %v: the warm-up round unrecorded", recs, want)
	}
	if !slices.Equal(sa.vals, []float64{3, 5}) || sa.err != nil {
		t.Errorf("a recorded %v (%v), want [3 5]", sa.vals, sa.err)
	}
	if sb.err == nil || len(sb.vals) != 0 {
		t.Errorf("b = %v (%v), want its failure and nothing recorded", sb.vals, sb.err)
	}

	broken := &tool{name: "c", err: errors.New("does not build")}
	var sc sample
	interleave([]*tool{broken}, []*sample{&sc}, 1, 2, func(int, *tool, bool) (float64, error) {
		t.Error("a tool that cannot run was run")
		return 0, nil
	})
	if sc.err == nil {
		t.Error("a tool that cannot run left no reason in its sample")
	}
}

func TestOnly(t *testing.T) {
	c := defaultConfig()
	c.Only = []string{"p7", "P4"}
	for id, want := range map[string]bool{"P1": false, "P4": true, "P5": true, "P6": false, "P7": true} {
		if got := c.wants(id); got != want {
			t.Errorf("-only p7,P4: wants(%s) = %v, want %v", id, got, want)
		}
	}
	if !defaultConfig().wants("P3") {
		t.Error("no -only: P3 not wanted")
	}
	for _, bad := range []string{"p9", "7", "p77", ""} {
		c.Only = []string{bad}
		if err := c.validate(); err == nil {
			t.Errorf("-only %q accepted", bad)
		}
	}
	c.Only = []string{"m1", "M2"}
	if err := c.validate(); err != nil || !c.wants("M1") || !c.wants("M2") || c.wants("P1") {
		t.Errorf("-only m1,M2: %v, wants M1 %v, M2 %v, P1 %v", err, c.wants("M1"), c.wants("M2"), c.wants("P1"))
	}
	for _, bad := range []string{"m3", "m0", "m"} {
		c.Only = []string{bad}
		if err := c.validate(); err == nil {
			t.Errorf("-only %q accepted", bad)
		}
	}
	c.Only, c.HoldTTL = []string{"p7"}, time.Second
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "2s") {
		t.Errorf("P7 with a 1s hold TTL: %v, want refused naming etcd's 2s", err)
	}
	c.Only = []string{"p4"}
	if err := c.validate(); err != nil {
		t.Errorf("P4 alone with a 1s hold TTL: %v", err)
	}
}

// just bench passes its flags through, so that -only prints a partial
// table without rewriting BENCHMARKS.md (the harness writes -out only when
// it is given): the recipe itself must not give -out.
func TestJustBenchLeavesOutToTheHarness(t *testing.T) {
	raw, err := os.ReadFile("../Justfile")
	if err != nil {
		t.Fatal(err)
	}
	_, recipe, ok := strings.Cut(string(raw), "\nbench *FLAGS:\n")
	if !ok {
		t.Fatal("Justfile has no bench recipe")
	}
	recipe, _, _ = strings.Cut(recipe, "\n\n")
	if strings.Contains(recipe, "-out") {
		t.Fatalf("just bench passes -out, so just bench -only p7 rewrites BENCHMARKS.md with a partial table:\n%s", recipe)
	}
}

// Flags that make no sense are refused at once, before anything is built
// or measured: -only given empty (-only "$UNSET") is not taken as no -only,
// which is a full run that rewrites BENCHMARKS.md, and an -etcdctl that is
// not an executable is not a "not measured" in P7's row at the end of the
// run.
func TestBadFlagsAreRefused(t *testing.T) {
	bench := filepath.Join(t.TempDir(), "bench")
	if out, err := exec.Command("go", "build", "-o", bench, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Not /nonexistent: on a shared machine a test may have made it.
	missing := filepath.Join(t.TempDir(), "nonexistent")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-only", ""}, `-only "" names no figure`},
		{[]string{"-only", "p7", "-etcdctl", missing}, "-etcdctl " + missing + ": stat " + missing + ": no such file or directory"},
		{[]string{"-only", "p7", "-etcdctl", t.TempDir()}, "is a directory"},
		{[]string{"-only", "p7", "-etcdctl", "fencerun-tidy-no-such-etcdctl"}, "executable file not found in $PATH"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a failure guard only
		cmd := exec.CommandContext(ctx, bench, append(tt.args, "-tmp", t.TempDir(), "-out", "-")...)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Errorf("%q did not stop at once: it measured:\n%s", tt.args, out)
		} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.want) {
			t.Errorf("%q: %v, want exit 2 and %q:\n%s", tt.args, err, tt.want, out)
		}
		cancel()
	}
}

func TestAllBusy(t *testing.T) {
	tests := []struct {
		name       string
		spans      []span
		n          int
		full, most int
	}{
		{"none", nil, 2, 0, 0},
		{"one slot, back to back", []span{{0, 10}, {10, 20}}, 1, 20, 1},
		{"two slots, overlap 5", []span{{0, 10}, {5, 15}}, 2, 5, 2},
		{"two slots, a gap", []span{{0, 10}, {5, 15}, {20, 30}, {25, 40}}, 2, 10, 2},
		{"touching is not overlapping", []span{{0, 10}, {10, 20}}, 2, 0, 1},
		{"three in two slots", []span{{0, 10}, {2, 12}, {4, 6}}, 2, 8, 3},
		{"unsorted", []span{{20, 30}, {0, 25}, {5, 22}}, 2, 20, 3},
	}
	for _, tt := range tests {
		full, most := allBusy(tt.spans, tt.n)
		if full != int64(tt.full) || most != tt.most {
			t.Errorf("%s: allBusy = %d, %d; want %d, %d", tt.name, full, most, tt.full, tt.most)
		}
	}
}

// The flock(1) semaphore script keeps to its slots: with more jobs than
// lock files, never more run at once than there are files, and every job
// runs once. A script that ran the job whatever flock said would fail here.
func TestFlockSemaphoreScript(t *testing.T) {
	cfg := smokeConfig(t)
	cfg.Only = []string{"m2"} // no etcd server
	h, err := newHarness(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if h.stampErr != nil || h.flockSlots.err != nil {
		t.Fatalf("stamp: %v; flock: %v", h.stampErr, h.flockSlots.err)
	}
	l, err := h.scenarioDir("sem")
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.burstOnce(h.flockSlots, l)
	if err != nil {
		t.Fatal(err)
	}
	if b.rate <= 0 || b.ideal <= 0 || b.busy < 0 || b.busy > 1 {
		t.Errorf("burst %+v: want positive rates and a share within 0..1", b)
	}
	none := &tool{name: "no lock", argv: func(_ lockSpec, cmd ...string) []string { return cmd }}
	if _, err := h.burstOnce(none, l); err == nil || !strings.Contains(err.Error(), "let too many in") {
		t.Errorf("a burst without a semaphore: %v, want too many at once", err)
	}
}
