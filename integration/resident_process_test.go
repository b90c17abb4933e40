package integration

// Process tests of the resident role (CONTRACT.md R1-R8): S1, S2, S7 and S8 hold
// for a resident as they do for a key. Same rules as process_test.go: every
// wait is on a file, a process, a log line or status output, bounded by the
// guard; the sleeps in commands are the scenario, never synchronisation.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// roleStatus is the part of `status --resident PATH --json` these tests
// read.
type roleStatus struct {
	Store  string `json:"store"`
	State  string `json:"state"`
	Holder *struct {
		PID        int    `json:"pid"`
		CommandPID int    `json:"command_pid"`
		Fence      uint64 `json:"fence"`
	} `json:"holder"`
}

// role runs `fencerun status --resident store --json`. A corrupt role
// exits 125 but still prints its document, so the exit alone is no error.
func (s *sandbox) role(store string) roleStatus {
	s.t.Helper()
	c := fencerun(s.state, "status", "--resident", store, "--json")
	c.Dir = s.work
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	var st roleStatus
	if jerr := json.Unmarshal(out, &st); jerr != nil {
		s.t.Fatalf("fencerun status --resident %s --json: %v, %v in %q\n%s", store, err, jerr, out, stderr.String())
	}
	return st
}

// waitRoleHeld waits until status shows store held by the wrapper pid.
func (s *sandbox) waitRoleHeld(store string, pid int) roleStatus {
	s.t.Helper()
	var st roleStatus
	if err := waitFor(func() bool { st = s.role(store); return st.State == "held" && st.Holder != nil && st.Holder.PID == pid }); err != nil {
		s.t.Fatalf("%s never held by pid %d; last status %+v", store, pid, st)
	}
	return st
}

// roleFree checks S8 for a resident once its wrappers have exited: status
// says free with no holder, and flock(1) can take the lock file at once,
// so no process kept the kernel lock.
func (s *sandbox) roleFree(store string) {
	s.t.Helper()
	if st := s.role(store); st.State != "free" || st.Holder != nil {
		s.t.Errorf("role of %s: state %q, holder %+v; want free and no holder", store, st.State, st.Holder)
	}
	c := exec.Command("flock", "-n", s.path(store+".resident.lock"), "true")
	if out, err := c.CombinedOutput(); err != nil {
		s.t.Errorf("flock -n %s.resident.lock true: %v %s; want the lock free", store, err, out)
	}
}

// nothingLeft fails the test if any process the test started is still
// alive: called when every wrapper has exited, it is S2 for all of them.
func (s *sandbox) nothingLeft(what string) {
	s.t.Helper()
	for _, pid := range s.survivors() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		s.t.Errorf("%s: pid %d left behind: %s", what, pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}
}

// waitLog waits until the log file of a wrapper contains line, a message
// the wrapper writes once it reached a state (such as waiting as a
// standby) that nothing else shows.
func (s *sandbox) waitLog(log, line string) {
	s.t.Helper()
	if err := waitFor(func() bool {
		b, _ := os.ReadFile(s.path(log + ".log"))
		return bytes.Contains(b, []byte(line))
	}); err != nil {
		b, _ := os.ReadFile(s.path(log + ".log"))
		s.t.Fatalf("%s.log never said %q:\n%s", log, line, b)
	}
}

// logSays is waitLog for a process that has exited: its log must say line
// already.
func (s *sandbox) logSays(log, line string) {
	s.t.Helper()
	if b, _ := os.ReadFile(s.path(log + ".log")); !bytes.Contains(b, []byte(line)) {
		s.t.Errorf("%s.log does not say %q:\n%s", log, line, b)
	}
}

// fenceIn reads a decimal fence a command wrote to name.
func (s *sandbox) fenceIn(name string) uint64 {
	s.t.Helper()
	text := strings.TrimSpace(waitFile(s.t, s.path(name)))
	f, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		s.t.Fatalf("%s: fence %q: %v", name, text, err)
	}
	return f
}

// build is a worker script: `build NAME hold` records the time it started
// in NAME.t (ns since the epoch), its fence in NAME.fence, then
// "<sh> <sleep>" in NAME.pids and waits for its sleep; TERM ends both at
// once, since neither traps it. `build NAME once` exits after the records.
// A copy of it with another mtime is another build (R4).
const build = `#!/bin/sh
date +%s%N > "$1.t.tmp" && mv "$1.t.tmp" "$1.t"
echo "$FENCERUN_FENCE" > "$1.fence.tmp" && mv "$1.fence.tmp" "$1.fence"
[ "$2" = once ] && exit 0
sleep 1000 & a=$!
echo "$$ $a" > "$1.tmp" && mv "$1.tmp" "$1.pids"
wait
`

// writeBuild deploys a build of the worker script (build name, mtime at)
// as a deploy does: written beside the program's one path and renamed over
// it, so that a running older build keeps its file. Only builds of one
// program hand over (R4); the name is for the caller's arguments.
func (s *sandbox) writeBuild(name string, at time.Time) string {
	s.t.Helper()
	p := s.path("worker")
	tmp := s.path(name + ".new")
	if err := os.WriteFile(tmp, []byte(build), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chtimes(tmp, at, at); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// stamp reads the start time a worker wrote to name.t.
func (s *sandbox) stamp(name string) time.Time {
	s.t.Helper()
	text := strings.TrimSpace(waitFile(s.t, s.path(name+".t")))
	ns, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		s.t.Fatalf("%s.t: %q: %v", name, text, err)
	}
	return time.Unix(0, ns)
}

// The holder wrapper is SIGKILLed: its direct child dies, and a
// standby that waited before the kill takes the role at once (the kernel
// lock died with the wrapper), but starts its command only after every
// leftover of the dead holder's tree is gone; its fence is greater.
func TestResidentWrapperKilled(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	holder := s.start(s.fencerun("holder", "run", "--resident", "app.db", "--", "sh", "-c",
		`echo $FENCERUN_FENCE > holder.fence; `+treeOfSleeps))
	pids := s.pids("pids")
	s.waitRoleHeld("app.db", holder.Process.Pid)
	// The standby's command checks for itself that none of the dead
	// holder's processes is alive when it starts.
	standby := s.start(s.fencerun("standby", "run", "--resident", "app.db", "--wait", "forever", "--", "sh", "-c",
		`echo $FENCERUN_FENCE > standby.fence; `+reportLive+` > seen.tmp; mv seen.tmp seen`))
	s.waitLog("standby", "waiting as a standby")

	killed := killWrapper(t, holder, pids[0])
	if code := exitOf(t, standby); code != 0 {
		t.Fatalf("standby exited %d, want 0", code)
	}
	t.Logf("standby's command ran and ended %v after the kill", time.Since(killed))
	if seen := waitFile(t, s.path("seen")); seen != "" {
		t.Errorf("the standby's command started while the dead holder's leftovers ran:\n%s", seen)
	}
	goneAtExit(t, "dead holder's tree", pids...)
	if h, sb := s.fenceIn("holder.fence"), s.fenceIn("standby.fence"); sb <= h {
		t.Errorf("standby's fence %d is not greater than the dead holder's %d", sb, h)
	}
	s.roleFree("app.db")
}

// A holder wrapper stopped for three TTLs keeps the role (S1: the
// kernel lock of a live holder is never taken), so the standby does not
// run; after SIGCONT the holder finds its deadline passed, stops its
// command and exits 76, and only then the standby runs.
func TestResidentWrapperStopped(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	const ttl = time.Second

	a := s.start(s.fencerun("a", "run", "--resident", "app.db", "--ttl", ttl.String(), "--",
		"sh", "-c", exclusive+`echo $$ > a.tmp && mv a.tmp a.pid && exec sleep 1000`))
	apid := s.pids("a.pid")
	s.waitRoleHeld("app.db", a.Process.Pid)
	b := s.start(s.fencerun("b", "run", "--resident", "app.db", "--wait", "forever", "--ttl", ttl.String(), "--",
		"sh", "-c", exclusive+`touch b.ran`))
	s.waitLog("b", "waiting as a standby")

	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() bool { return procState(a.Process.Pid) == 'T' }); err != nil {
		t.Fatalf("wrapper a never stopped (state %q)", procState(a.Process.Pid))
	}
	// The scenario: the wrapper stays stopped for three TTLs. Nothing
	// waits for this to pass.
	time.Sleep(3 * ttl)
	if _, err := os.Stat(s.path("b.ran")); err == nil {
		t.Errorf("b's command ran while a was stopped holding the role")
	}
	if st := s.role("app.db"); st.State != "held" || st.Holder == nil || st.Holder.PID != a.Process.Pid {
		t.Errorf("after three TTLs stopped: state %q, holder %+v; want held by a (pid %d)", st.State, st.Holder, a.Process.Pid)
	}

	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, a); code != 76 {
		t.Errorf("stopped holder a: exit %d after SIGCONT, want 76", code)
	}
	goneAtExit(t, "a's command", apid...)
	if code := exitOf(t, b); code != 0 {
		t.Errorf("standby b: exit %d, want 0", code)
	}
	if _, err := os.Stat(s.path("b.ran")); err != nil {
		t.Errorf("b's command never ran")
	}
	s.noOverlap()
	s.roleFree("app.db")
}

// sigrecOnce builds integration/internal/sigrec once for this file's tests.
var sigrecOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "fencerun-sigrec-")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "sigrec")
	if out, err := exec.Command("go", "build", "-o", p, "./internal/sigrec").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building sigrec: %v\n%s", err, out)
	}
	return p, nil
})

// S7 for a resident: every forwarded signal reaches every process of
// the command's group; after a terminating one fencerun waits for the
// command and releases the role.
func TestResidentSignalsForwarded(t *testing.T) {
	t.Parallel()
	sigrec, err := sigrecOnce()
	if err != nil {
		t.Fatal(err)
	}
	for _, end := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(sigName(end), func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			w := s.start(s.fencerun("wrapper", "run", "--resident", "app.db", "--", sigrec, "rec"))
			var procs []string
			if err := waitFor(func() bool { procs = recorded(s.path("rec"), "ready"); return len(procs) == 2 }); err != nil {
				t.Fatalf("sigrec never ready: %q", procs)
			}
			s.waitRoleHeld("app.db", w.Process.Pid)
			sendAndCheckSignals(t, s, w, procs, end)
			for _, p := range procs {
				pid, _ := strconv.Atoi(p)
				goneAtExit(t, "sigrec", pid)
			}
			s.roleFree("app.db")
		})
	}
}

// S8 for a resident: whichever way a run ends, the role is free
// afterwards and no process of the command is left.
func TestResidentEveryExitReleases(t *testing.T) {
	t.Parallel()
	// Each case starts its wrapper(s) and returns the pids of the command's
	// tree, once fencerun exited with want.
	cases := []struct {
		name string
		want int
		run  func(s *sandbox) []int
	}{
		{"command not found", 127, func(s *sandbox) []int {
			return s.runRole(127, "--", "no-such-command-fencerun-test")
		}},
		{"not executable", 126, func(s *sandbox) []int {
			if err := os.WriteFile(s.path("noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
				s.t.Fatal(err)
			}
			return s.runRole(126, "--", "./noexec")
		}},
		{"command exits by itself", 3, func(s *sandbox) []int {
			// The background sleep is a leftover: stopped before release.
			return s.runRole(3, "--", "sh", "-c", `sleep 1000 & echo "$$ $!" > pids; exit 3`)
		}},
		{"timeout", 124, func(s *sandbox) []int {
			return s.runRole(124, "--timeout", "1s", "--", "sh", "-c", treeOfSleeps)
		}},
		{"stuck", 78, func(s *sandbox) []int {
			return s.runRole(78, "--stuck-after", "1s", "--", "sh", "-c", `fencerun tick || exit 9; `+treeOfSleeps)
		}},
		{"fence broken", 76, func(s *sandbox) []int {
			// The lock path no longer names the locked inode: the holder
			// has lost the role (the resident package's Renew and Check).
			w := s.start(s.fencerun("holder", "run", "--resident", "app.db", "--", "sh", "-c", treeOfSleeps))
			pids := s.pids("pids")
			s.waitRoleHeld("app.db", w.Process.Pid)
			if err := os.Remove(s.path("app.db.resident.lock")); err != nil {
				s.t.Fatal(err)
			}
			if code := exitOf(s.t, w); code != 76 {
				s.t.Errorf("holder: exit %d, want 76", code)
			}
			return pids
		}},
		{"handover", 77, func(s *sandbox) []int {
			old := s.writeBuild("v1", time.Now().Add(-2*time.Hour))
			w := s.start(s.fencerun("holder", "run", "--resident", "app.db", "--", old, "v1", "hold"))
			pids := s.pids("v1.pids")
			s.waitRoleHeld("app.db", w.Process.Pid)
			newer := s.writeBuild("v2", time.Now().Add(-time.Hour))
			if code := s.run("newcomer", "run", "--resident", "app.db", "--", newer, "v2", "once"); code != 0 {
				s.t.Errorf("newcomer: exit %d, want 0", code)
			}
			if code := exitOf(s.t, w); code != 77 {
				s.t.Errorf("holder: exit %d, want 77", code)
			}
			if f1, f2 := s.fenceIn("v1.fence"), s.fenceIn("v2.fence"); f2 <= f1 {
				s.t.Errorf("newcomer's fence %d is not greater than the holder's %d", f2, f1)
			}
			return pids
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			pids := tc.run(s)
			goneAtExit(t, "the command's tree", pids...)
			s.roleFree("app.db")
			s.nothingLeft("after exit " + strconv.Itoa(tc.want))
		})
	}
}

// runRole runs one resident wrapper on app.db with args and checks its exit
// code; it returns the pids the command wrote to pids, if it wrote any.
func (s *sandbox) runRole(want int, args ...string) []int {
	s.t.Helper()
	if code := s.run("holder", append([]string{"run", "--resident", "app.db"}, args...)...); code != want {
		s.t.Errorf("exit %d, want %d", code, want)
	}
	return readPids(s.path("pids"))
}

// Handover latency: from starting a newer build to its command
// running, while the older build's command exits at once on TERM. Only
// logged: a measurement, not a contract. Each round's newcomer holds the
// role for the next round's newer build.
func TestResidentHandoverTiming(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	const rounds = 5
	base := time.Now().Add(-24 * time.Hour)

	name := func(i int) string { return fmt.Sprintf("b%d", i) }
	exe := s.writeBuild(name(0), base)
	holder := s.start(s.fencerun(name(0), "run", "--resident", "app.db", "--", exe, name(0), "hold"))
	s.pids(name(0) + ".pids")
	s.waitRoleHeld("app.db", holder.Process.Pid)
	prevFence := s.fenceIn(name(0) + ".fence")

	var took []time.Duration
	for i := 1; i <= rounds; i++ {
		exe := s.writeBuild(name(i), base.Add(time.Duration(i)*time.Minute))
		oldPids := s.pids(name(i-1) + ".pids")
		started := time.Now()
		newcomer := s.start(s.fencerun(name(i), "run", "--resident", "app.db", "--", exe, name(i), "hold"))
		running := s.stamp(name(i)).Sub(started)
		if code := exitOf(t, holder); code != 77 {
			t.Errorf("round %d: older holder exited %d, want 77", i, code)
		}
		goneAtExit(t, fmt.Sprintf("round %d: older build's tree", i), oldPids...)
		s.waitRoleHeld("app.db", newcomer.Process.Pid)
		if f := s.fenceIn(name(i) + ".fence"); f <= prevFence {
			t.Errorf("round %d: fence %d is not greater than the previous %d", i, f, prevFence)
		} else {
			prevFence = f
		}
		took = append(took, running)
		holder = newcomer
	}
	pids := s.pids(name(rounds) + ".pids")
	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exitOf(t, holder)
	goneAtExit(t, "last build's tree", pids...)
	s.roleFree("app.db")

	sorted := slices.Sorted(slices.Values(took))
	t.Logf("newer build started -> its command running, %d handovers: median %v, min %v, max %v (all: %v)",
		len(took), sorted[len(sorted)/2], sorted[0], sorted[len(sorted)-1], took)
}
