package integration

// Process tests: the built binary with real process trees and real signals,
// for what a script cannot express. Every wait is on a file, a process or
// status output; the guard bounds it. The few sleeps in commands are the
// scenario (a command that runs a while, a wrapper paused for three TTLs),
// never synchronisation.

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
	"syscall"
	"testing"
	"time"
)

// exclusive prefixes a command's shell script: it takes the check lock,
// an flock on the open file description of fd 9, which every process the
// command starts inherits, so the lock is held until the last of them is
// gone. A command that cannot take it records OVERLAP: two commands of one
// key ran at once, or one ran beside the leftovers of another.
const exclusive = `exec 9>>check.lock; flock -n 9 || { echo "OVERLAP fence=$FENCERUN_FENCE" >> overlap; exit 99; }; `

// treeOfSleeps is a command whose tree is the shell and two sleeps; it
// writes "<sh> <sleep> <sleep>" to pids once all three exist.
const treeOfSleeps = `sleep 1000 & a=$!; sleep 1000 & b=$!; echo "$$ $a $b" > pids.tmp && mv pids.tmp pids; wait`

// reportLive is a script that prints "alive PID STATE" for every pid in the
// file pids that is alive. kill -0 alone would count zombies, and init need
// not reap the orphans a killed wrapper leaves to it (this host's does not).
const reportLive = `for p in $(cat pids); do if kill -0 $p 2>/dev/null; then st=$(awk '{print $3}' /proc/$p/stat 2>/dev/null); [ "$st" = Z ] || echo "alive $p $st"; fi; done`

// sandbox is one test's working directory, which is also the working
// directory of every process it starts, and its fencerun state root.
type sandbox struct {
	t     *testing.T
	work  string
	state string
	// mark is an environment entry every process the test starts carries,
	// and the commands inherit (fencerun strips only FENCERUN_*): cleanup
	// finds survivors by it and never touches anything else.
	mark string
	logs []string
	// env is added to every fencerun's environment: FENCERUN_ETCD for
	// a test on etcd.
	env []string
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	work := t.TempDir()
	s := &sandbox{t: t, work: work, state: filepath.Join(work, "state"), mark: "ITEST_SANDBOX=" + work}
	t.Cleanup(s.cleanup)
	return s
}

// path is name in the working directory.
func (s *sandbox) path(name string) string { return filepath.Join(s.work, name) }

// fencerun is a fencerun command in the sandbox. Its stdout and stderr (debug
// logs) go to the file log, so that no pipe held by a leftover process can
// keep the test waiting; cleanup shows the logs of a failed test.
func (s *sandbox) fencerun(log string, args ...string) *exec.Cmd {
	s.t.Helper()
	c := fencerun(s.state, args...)
	c.Env = append(c.Env, s.env...)
	s.prepare(c, log)
	return c
}

// prepare gives c the sandbox's directory, mark and PATH (with fencerun in
// it, for `fencerun tick` inside commands), and its output to log.
func (s *sandbox) prepare(c *exec.Cmd, log string) {
	s.t.Helper()
	if c.Env == nil {
		c.Env = os.Environ()
	}
	c.Env = append(c.Env, s.mark, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	c.Dir = s.work
	f, err := os.OpenFile(s.path(log+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { f.Close() })
	c.Stdout, c.Stderr = f, f
	s.logs = append(s.logs, log)
}

// start starts c.
func (s *sandbox) start(c *exec.Cmd) *exec.Cmd {
	s.t.Helper()
	if err := c.Start(); err != nil {
		s.t.Fatalf("%v: %v", c.Args, err)
	}
	return c
}

// run runs a fencerun command to its end and returns its exit code.
func (s *sandbox) run(log string, args ...string) int {
	s.t.Helper()
	return exitOf(s.t, s.start(s.fencerun(log, args...)))
}

// keyStatus is the part of `status --json` these tests read.
type keyStatus struct {
	State  string `json:"state"`
	Holder *struct {
		Name  string `json:"name"`
		PID   int    `json:"pid"`
		Fence uint64 `json:"fence"`
	} `json:"holder"`
	// Holders is every holder (M3), each with its kind and slot.
	Holders []struct {
		Kind  string `json:"kind"`
		Slot  *int   `json:"slot"`
		Slots int    `json:"slots"`
		Name  string `json:"name"`
		PID   int    `json:"pid"`
		Fence uint64 `json:"fence"`
	} `json:"holders"`
	Waiters []struct {
		Name  string `json:"name"`
		PID   int    `json:"pid"`
		Kind  string `json:"kind"`
		Slots int    `json:"slots"`
	} `json:"waiters"`
}

// status runs `fencerun status key --json`.
func (s *sandbox) status(key string) keyStatus {
	s.t.Helper()
	out, stderr, code := s.output("status", key, "--json")
	if code != 0 {
		s.t.Fatalf("fencerun status %s --json: exit %d\n%s%s", key, code, out, stderr)
	}
	var st keyStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		s.t.Fatalf("fencerun status %s --json: %v in %q", key, err, out)
	}
	return st
}

// output runs a fencerun command to its end, killed and failed if it takes
// longer than the guard (exitOf), and returns its stdout, stderr and exit
// code.
func (s *sandbox) output(args ...string) (string, string, int) {
	s.t.Helper()
	c := fencerun(s.state, args...)
	c.Env = append(c.Env, s.env...)
	c.Dir = s.work
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	code := exitOf(s.t, s.start(c))
	return stdout.String(), stderr.String(), code
}

// waiterNames are the names of key's waiters in queue order.
func (st keyStatus) waiterNames() []string {
	var names []string
	for _, w := range st.Waiters {
		names = append(names, w.Name)
	}
	return names
}

// waitQueue waits until status shows exactly the waiters names, in order.
func (s *sandbox) waitQueue(key string, names ...string) {
	s.t.Helper()
	var last []string
	if err := waitFor(func() bool { last = s.status(key).waiterNames(); return slices.Equal(last, names) }); err != nil {
		s.t.Fatalf("waiters of %s: want %q, last seen %q", key, names, last)
	}
}

// waitHeld waits until status shows key held.
func (s *sandbox) waitHeld(key string) keyStatus {
	s.t.Helper()
	var st keyStatus
	if err := waitFor(func() bool { st = s.status(key); return st.State == "held" && st.Holder != nil }); err != nil {
		s.t.Fatalf("%s never held; last status %+v", key, st)
	}
	return st
}

// pids waits for the pid file name and returns its pids.
func (s *sandbox) pids(name string) []int {
	s.t.Helper()
	waitFile(s.t, s.path(name))
	pids := readPids(s.path(name))
	if len(pids) == 0 {
		s.t.Fatalf("%s holds no pids", name)
	}
	return pids
}

// noOverlap fails the test if a command recorded OVERLAP.
func (s *sandbox) noOverlap() {
	s.t.Helper()
	if b, err := os.ReadFile(s.path("overlap")); err == nil {
		s.t.Errorf("commands overlapped:\n%s", b)
	}
}

// survivors are the live (not zombie) processes carrying the mark.
func (s *sandbox) survivors() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(env), "\x00"), s.mark) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cleanup reports and kills whatever the test left running: at the end of
// a test every wrapper has exited, so by S2 nothing of any command may be
// left. A wrapper left is ended with SIGTERM first, so that it removes
// its command's cgroup (endRun); the rest is SIGKILLed. It shows the
// wrappers' logs of a failed test.
func (s *sandbox) cleanup() {
	left := s.survivors()
	for _, pid := range left {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		msg := fmt.Sprintf("left behind: pid %d: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		if s.t.Failed() {
			s.t.Log(msg)
		} else {
			s.t.Error(msg)
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Dir(exe) == filepath.Dir(bin) {
			if p, err := os.FindProcess(pid); err == nil {
				endRun(p)
			}
		}
	}
	for _, pid := range left {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if s.t.Failed() {
		for _, l := range slices.Compact(slices.Sorted(slices.Values(s.logs))) {
			b, _ := os.ReadFile(s.path(l + ".log"))
			s.t.Logf("--- %s.log:\n%s", l, b)
		}
	}
}

// procState is the state letter of pid in /proc/PID/stat, 0 if it is gone.
func procState(pid int) byte {
	f := procStat(pid)
	if len(f) < 1 {
		return 0
	}
	return f[0][0]
}

// procStat returns the fields of /proc/PID/stat after the command name:
// [0] is the state, [2] the process group, [5] the terminal's foreground
// process group.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// goneAtExit checks S2 right after fencerun exited: none of pids may be
// left. A pid still alive is an error; the test then waits to say whether
// it died late or never.
func goneAtExit(t *testing.T, what string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if !alive(pid) {
			continue
		}
		t.Errorf("%s: pid %d still alive when fencerun exited", what, pid)
		if waitFor(func() bool { return !alive(pid) }) == nil {
			t.Logf("%s: pid %d died after fencerun exited", what, pid)
		}
	}
}

// waitGoneTimed waits until every pid is gone and returns how long it took.
func waitGoneTimed(t *testing.T, since time.Time, pids ...int) time.Duration {
	t.Helper()
	waitGone(t, pids...)
	return time.Since(since)
}

// 1. Five waiters on one key: they run one at a time, in arrival order,
// with strictly increasing fences.
func TestContentionFIFO(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	// The holder keeps the key until the test writes a line to its stdin,
	// so that the waiters queue up behind it one by one.
	h0 := s.fencerun("h0", "run", "--key", "job", "--name", "h0", "--",
		"sh", "-c", exclusive+`echo "h0 $FENCERUN_FENCE" >> order; touch ready; read x`)
	gate, err := h0.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.start(h0)
	waitFile(t, s.path("ready"))

	var waiters []*exec.Cmd
	var names []string
	for i := 1; i <= 5; i++ {
		name := fmt.Sprintf("w%d", i)
		// The sleep widens the window in which an overlapping command
		// would find the check lock taken.
		waiters = append(waiters, s.start(s.fencerun(name, "run", "--key", "job", "--wait", "60s", "--name", name, "--",
			"sh", "-c", exclusive+`echo "`+name+` $FENCERUN_FENCE" >> order; sleep 0.1`)))
		names = append(names, name)
		s.waitQueue("job", names...)
	}

	if _, err := gate.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	gate.Close()
	if code := exitOf(t, h0); code != 0 {
		t.Errorf("holder h0 exited %d, want 0", code)
	}
	for i, w := range waiters {
		if code := exitOf(t, w); code != 0 {
			t.Errorf("waiter w%d exited %d, want 0", i+1, code)
		}
	}
	s.noOverlap()

	b, _ := os.ReadFile(s.path("order"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := append([]string{"h0"}, names...)
	if len(lines) != len(want) {
		t.Fatalf("commands ran:\n%s\nwant %q in this order", b, want)
	}
	var prev uint64
	for i, l := range lines {
		name, fence, _ := strings.Cut(l, " ")
		f, err := strconv.ParseUint(fence, 10, 64)
		if err != nil {
			t.Fatalf("line %q: fence %q: %v", l, fence, err)
		}
		if name != want[i] {
			t.Errorf("command %d to run was %s, want %s (arrival order); all:\n%s", i+1, name, want[i], b)
		}
		if i > 0 && f <= prev {
			t.Errorf("fence of %s is %d, not greater than the previous %d", name, f, prev)
		}
		prev = f
	}
}

// 2. The wrapper is SIGKILLed: its direct child dies at once, and the next
// holder takes over without waiting out the TTL, but only after every
// leftover of the dead holder's tree is gone.
func TestWrapperKilled(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	const ttl = 60 * time.Second

	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", ttl.String(), "--", "sh", "-c", treeOfSleeps))
	pids := s.pids("pids")
	waiter := s.start(s.fencerun("waiter", "run", "--key", "job", "--wait", "60s", "--name", "waiter", "--", "sh", "-c",
		reportLive+` > seen.tmp; mv seen.tmp seen`))
	s.waitQueue("job", "waiter")

	killed := killWrapper(t, holder, pids[0])

	// exitOf's guard (30s) is shorter than the TTL (60s): the waiter
	// cannot pass by waiting out the lease.
	if code := exitOf(t, waiter); code != 0 {
		t.Fatalf("waiter exited %d, want 0", code)
	}
	took := time.Since(killed)
	t.Logf("waiter's command ran and ended %v after the kill (TTL %v)", took, ttl)
	if took >= ttl {
		t.Errorf("waiter took %v, not less than the TTL %v", took, ttl)
	}
	if seen := waitFile(t, s.path("seen")); seen != "" {
		t.Errorf("the waiter's command started while the dead holder's leftovers ran:\n%s", seen)
	}
	goneAtExit(t, "dead holder's tree", pids...)
}

// 2b. The same with nobody waiting, so that nothing but the kernel can stop
// the direct child (Pdeathsig); the next run, started afterwards, stops the
// leftovers before its command starts.
func TestWrapperKilledAlone(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", "60s", "--", "sh", "-c", treeOfSleeps))
	pids := s.pids("pids")
	killed := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("direct child (sh, pid %d) gone %v after SIGKILL of the wrapper (spec: within 1s)", pids[0], waitGoneTimed(t, killed, pids[0]))
	exitOf(t, holder)

	code := s.run("next", "run", "--key", "job", "--no-wait", "--", "sh", "-c",
		reportLive+` > seen`)
	if code != 0 {
		t.Fatalf("next run: exit %d, want 0", code)
	}
	if seen, _ := os.ReadFile(s.path("seen")); len(seen) != 0 {
		t.Errorf("the next command started while the dead holder's leftovers ran:\n%s", seen)
	}
	goneAtExit(t, "dead holder's tree", pids...)
}

// 3. A wrapper stopped for three TTLs keeps its lease (the holder is alive,
// S1), and the two commands never overlap; after SIGCONT it finds its
// lease lost, stops its command and exits 76.
func TestWrapperStopped(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	const ttl = time.Second

	a := s.start(s.fencerun("a", "run", "--key", "job", "--ttl", ttl.String(), "--name", "a", "--",
		"sh", "-c", exclusive+`echo $$ > a.tmp && mv a.tmp a.pid && exec sleep 1000`))
	apid := s.pids("a.pid")
	b := s.start(s.fencerun("b", "run", "--key", "job", "--wait", "60s", "--name", "b", "--",
		"sh", "-c", exclusive+`touch b.ran`))
	s.waitQueue("job", "b")

	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// However the test ends, a is not left stopped (after a's Wait,
	// os.Process signals nothing, so a reused pid is never hit).
	t.Cleanup(func() {
		_ = a.Process.Signal(syscall.SIGCONT)
		_ = a.Process.Kill()
	})
	if err := waitFor(func() bool { return procState(a.Process.Pid) == 'T' }); err != nil {
		t.Fatalf("wrapper a never stopped (state %q)", procState(a.Process.Pid))
	}
	// The scenario: the wrapper stays stopped for three TTLs. Nothing
	// waits for this to pass.
	time.Sleep(3 * ttl)
	if _, err := os.Stat(s.path("b.ran")); err == nil {
		t.Errorf("b's command ran while a was stopped holding the lease")
	}
	st := s.status("job")
	t.Logf("after three TTLs stopped: state %s, waiters %q", st.State, st.waiterNames())

	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, a); code != 76 {
		t.Errorf("stopped holder a: exit %d after SIGCONT, want 76", code)
	}
	goneAtExit(t, "a's command", apid...)
	if code := exitOf(t, b); code != 0 {
		t.Errorf("waiter b: exit %d, want 0", code)
	}
	if _, err := os.Stat(s.path("b.ran")); err != nil {
		t.Errorf("b's command never ran")
	}
	s.noOverlap()
}

// 4. release --force stops the holder's whole tree; the holder exits 76.
func TestReleaseForce(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--", "sh", "-c", treeOfSleeps))
	pids := s.pids("pids")
	s.waitHeld("job")

	released := time.Now()
	if code := s.run("release", "release", "job", "--force"); code != 0 {
		t.Fatalf("release --force: exit %d, want 0", code)
	}
	t.Logf("whole tree dead %v after release --force began (P3: median at most 100ms)", waitGoneTimed(t, released, pids...))
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder: exit %d, want 76", code)
	}
}

// 5. Renewals that cannot get through (the key's guard lock held by someone
// else) break the fence: the tree dies and the holder exits 76.
func TestRenewalsFail(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	const ttl = 2 * time.Second
	// The tree ignores the stop signal and the grace is far longer than the
	// guard: only a SIGKILL at the keeper's StopBy, before the lease's
	// expiry, can end it in time (S3).
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", ttl.String(), "--grace", "10m",
		"--", "sh", "-c", "trap '' TERM; "+treeOfSleeps))
	pids := s.pids("pids")
	s.waitHeld("job")

	guard := filepath.Join(s.state, "keys", "k-job", "guard")
	if _, err := os.Stat(guard); err != nil {
		t.Fatalf("the key's guard file: %v", err)
	}
	blocker := exec.Command("flock", guard, "sh", "-c", `echo $$ > blocker.tmp && mv blocker.tmp blocker.pid && exec sleep 1000`)
	s.prepare(blocker, "blocker")
	blocker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.start(blocker)
	blockerPids := append(s.pids("blocker.pid"), blocker.Process.Pid)
	defer func() {
		_ = syscall.Kill(-blocker.Process.Pid, syscall.SIGKILL)
		_ = blocker.Wait()
		waitGone(t, blockerPids...)
	}()
	locked := time.Now()
	expires := leaseExpiry(s.state, "job")

	died := waitGoneTimed(t, locked, pids...)
	t.Logf("tree dead %v after the guard was locked; lease record expiry %s", died, expiryMargin(expires, locked.Add(died)))
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder: exit %d, want 76", code)
	}
}

// leaseExpiry reads the holder's expiry from key's lease record (0600, and
// the test runs as its owner). Zero if it cannot be read.
func leaseExpiry(state, key string) time.Time {
	b, err := readLeaseRecord(filepath.Join(state, "keys", "k-"+key, "lease"))
	if err != nil {
		return time.Time{}
	}
	var r struct {
		Holder *struct {
			Expires time.Time `json:"expires"`
		} `json:"holder"`
	}
	if json.Unmarshal(b, &r) != nil || r.Holder == nil {
		return time.Time{}
	}
	return r.Holder.Expires
}

// expiryMargin says how the observed death relates to the record's expiry.
// Only logged: observing a death by polling has its own latency.
func expiryMargin(expires, dead time.Time) string {
	if expires.IsZero() {
		return "unknown"
	}
	if d := expires.Sub(dead); d >= 0 {
		return fmt.Sprintf("%s, %v after the death was observed", expires.Format(time.RFC3339Nano), d)
	}
	return fmt.Sprintf("%s, %v BEFORE the death was observed", expires.Format(time.RFC3339Nano), dead.Sub(expires))
}

// 6. cancel: the holder stops its command gracefully and exits 77; the key
// is free afterwards.
func TestCancel(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--", "sh", "-c", treeOfSleeps))
	pids := s.pids("pids")
	s.waitHeld("job")

	if code := s.run("cancel", "cancel", "job"); code != 0 {
		t.Fatalf("cancel: exit %d, want 0", code)
	}
	if code := exitOf(t, holder); code != 77 {
		t.Errorf("holder: exit %d, want 77", code)
	}
	goneAtExit(t, "cancelled tree", pids...)
	if st := s.status("job"); st.State != "free" || st.Holder != nil {
		t.Errorf("after cancel: state %q, holder %+v; want free and no holder", st.State, st.Holder)
	}
}

// 7a. A command that ignores the stop signal is killed after --grace.
func TestTimeoutIgnoredTerm(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	start := time.Now()
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--timeout", "1s", "--grace", "1s", "--",
		"sh", "-c", `trap "" TERM; sleep 1000 & echo "$$ $!" > pids.tmp && mv pids.tmp pids; wait`))
	pids := s.pids("pids")
	code := exitOf(t, holder)
	took := time.Since(start)
	if code != 124 {
		t.Errorf("exit %d, want 124", code)
	}
	goneAtExit(t, "tree that ignores TERM", pids...)
	t.Logf("exited %v after start (timeout 1s + grace 1s)", took)
	// A lower bound, not a window: SIGKILL before the grace ended would
	// mean the grace was not honoured.
	if took < 2*time.Second {
		t.Errorf("exited %v after start, before timeout+grace (2s): the grace was cut short", took)
	}
}

// 7b. A command stopped with SIGSTOP still dies on release --force: the
// stop signal is followed by SIGCONT.
func TestStoppedCommandReleased(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	// TTL and grace longer than the guard: a command left stopped until
	// the SIGKILL at the end of the grace fails the test.
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--ttl", "120s", "--grace", "120s", "--",
		"sh", "-c", `echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 1000`))
	pid := s.pids("pid")[0]
	s.waitHeld("job")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() bool { return procState(pid) == 'T' }); err != nil {
		t.Fatalf("command pid %d never stopped (state %q)", pid, procState(pid))
	}

	released := time.Now()
	if code := s.run("release", "release", "job", "--force"); code != 0 {
		t.Fatalf("release --force: exit %d, want 0", code)
	}
	t.Logf("stopped command gone %v after release --force", waitGoneTimed(t, released, pid))
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder: exit %d, want 76", code)
	}
}

// 8. Every forwarded signal reaches every process of the command's group.
func TestSignalsForwarded(t *testing.T) {
	t.Parallel()
	sigrec := filepath.Join(t.TempDir(), "sigrec")
	if out, err := exec.Command("go", "build", "-o", sigrec, "./internal/sigrec").CombinedOutput(); err != nil {
		t.Fatalf("building sigrec: %v\n%s", err, out)
	}
	for _, end := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(sigName(end), func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			w := s.start(s.fencerun("wrapper", "run", "--key", "sig", "--", sigrec, "rec"))
			var procs []string
			if err := waitFor(func() bool { procs = recorded(s.path("rec"), "ready"); return len(procs) == 2 }); err != nil {
				t.Fatalf("sigrec never ready: %q", procs)
			}
			sendAndCheckSignals(t, s, w, procs, end)
		})
	}
}

// recorded are the pids, sorted, that wrote "<pid> what" to the sigrec file.
// sendAndCheckSignals sends USR1, USR2, WINCH, ALRM, VTALRM, XCPU (issue
// 26: neither forwarded nor fatal before) and then end to the wrapper
// w, whose command is sigrec with its two processes procs: each signal
// must reach both, and the wrapper exit 0 once sigrec exits on end.
func sendAndCheckSignals(t *testing.T, s *sandbox, w *exec.Cmd, procs []string, end syscall.Signal) {
	t.Helper()
	for _, sig := range append(nonEnding[:len(nonEnding):len(nonEnding)], end) {
		if err := w.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if sig == end {
			break
		}
		var got []string
		if err := waitFor(func() bool { got = recorded(s.path("rec"), sigName(sig)); return len(got) == 2 }); err != nil {
			t.Fatalf("%s reached %q, want both of %q", sigName(sig), got, procs)
		}
	}
	if code := exitOf(t, w); code != 0 {
		t.Errorf("exit %d, want 0 (sigrec exits 0 on %s)", code, sigName(end))
	}
	for _, sig := range append(nonEnding[:len(nonEnding):len(nonEnding)], end) {
		if got := recorded(s.path("rec"), sigName(sig)); !slices.Equal(got, procs) {
			t.Errorf("%s reached %q, want %q", sigName(sig), got, procs)
		}
	}
}

func recorded(path, what string) []string {
	b, _ := os.ReadFile(path)
	var pids []string
	for l := range strings.Lines(string(b)) {
		if pid, w, ok := strings.Cut(strings.TrimSpace(l), " "); ok && w == what {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids)
}

// nonEnding are the forwarded signals that sigrec records and lives on.
var nonEnding = []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
	syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGXCPU}

func sigName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGINT: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP",
		syscall.SIGQUIT: "QUIT", syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2", syscall.SIGWINCH: "WINCH",
		syscall.SIGALRM: "ALRM", syscall.SIGVTALRM: "VTALRM", syscall.SIGXCPU: "XCPU"}[s]
}

// 9. A signal while waiting ends the wait: 128+N, no queue entry, no
// command.
func TestSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	holder := s.fencerun("holder", "run", "--key", "job", "--", "sh", "-c", `touch ready; read x`)
	gate, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.start(holder)
	waitFile(t, s.path("ready"))
	waiter := s.start(s.fencerun("waiter", "run", "--key", "job", "--wait", "60s", "--name", "waiter", "--", "touch", "ran"))
	s.waitQueue("job", "waiter")

	if err := waiter.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, waiter); code != 128+int(syscall.SIGTERM) {
		t.Errorf("waiter: exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	if st := s.status("job"); len(st.Waiters) != 0 || st.State != "held" {
		t.Errorf("after the waiter's exit: state %q, waiters %q; want held, none", st.State, st.waiterNames())
	}

	gate.Write([]byte("done\n"))
	gate.Close()
	if code := exitOf(t, holder); code != 0 {
		t.Errorf("holder: exit %d, want 0", code)
	}
	if _, err := os.Stat(s.path("ran")); err == nil {
		t.Errorf("the interrupted waiter's command ran")
	}
}

// 10. A command that leaves a background process holding fencerun's stdout
// open: the pipeline still ends, because the leftover is stopped.
func TestPipelineBackgroundChild(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)

	sh := exec.Command("sh", "-c", `{ fencerun run --key job -- sh -c 'sleep 1000 & echo $! > pid; echo hi'; echo $? > code; } | cat`)
	sh.Env = append(os.Environ(), "FENCERUN_DIR="+s.state)
	s.prepare(sh, "pipeline")
	if code := exitOf(t, s.start(sh)); code != 0 {
		t.Errorf("pipeline: exit %d, want 0", code)
	}
	if code := strings.TrimSpace(waitFile(t, s.path("code"))); code != "0" {
		t.Errorf("fencerun: exit %s, want 0", code)
	}
	if out, _ := os.ReadFile(s.path("pipeline.log")); !strings.Contains(string(out), "hi\n") {
		t.Errorf("pipeline output %q lacks hi", out)
	}
	goneAtExit(t, "background sleep", s.pids("pid")...)
}

// 11. Descendants that left the group (setsid) or were reparented (double
// fork) are stopped when the command exits.
func TestEscapedDescendants(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	if err := syscall.Mkfifo(s.path("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The setsid'd shell hands its pid over the fifo, so the command exits
	// only once the escapee is in place; the double fork is synchronous.
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--", "sh", "-c",
		`setsid sh -c 'echo $$ > fifo; exec sleep 1000' & read p1 < fifo; echo $p1 > p1; (sleep 1000 & echo $! > p2); exit 0`))
	code := exitOf(t, holder)
	p1, p2 := s.pids("p1"), s.pids("p2")
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	goneAtExit(t, "setsid descendant", p1...)
	goneAtExit(t, "double-forked descendant", p2...)
}

// 12. The stuck watchdog: a command that ticked once and then stopped
// ticking is stopped with 78; one that never ticks runs to its own end.
func TestStuck(t *testing.T) {
	t.Parallel()
	t.Run("ticked once", func(t *testing.T) {
		t.Parallel()
		s := newSandbox(t)
		holder := s.start(s.fencerun("holder", "run", "--key", "job", "--stuck-after", "1s", "--",
			"sh", "-c", `fencerun tick || exit 9; echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 1000`))
		code := exitOf(t, holder)
		if code == 9 {
			t.Fatal("fencerun tick failed inside the command")
		}
		if code != 78 {
			t.Errorf("exit %d, want 78", code)
		}
		goneAtExit(t, "stuck command", s.pids("pid")...)
	})
	t.Run("never ticked", func(t *testing.T) {
		t.Parallel()
		s := newSandbox(t)
		if code := s.run("holder", "run", "--key", "job", "--stuck-after", "1s", "--", "sh", "-c", `sleep 2; exit 0`); code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
	})
}

// killWrapper SIGKILLs a holder's wrapper and checks that its direct child
// (the command's shell, childPid) dies with it (Pdeathsig, S2) and that the
// wrapper died of the signal. It returns when the kill was sent.
func killWrapper(t *testing.T, holder *exec.Cmd, childPid int) time.Time {
	t.Helper()
	killed := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("direct child (sh, pid %d) gone %v after SIGKILL of the wrapper (spec: within 1s)", childPid, waitGoneTimed(t, killed, childPid))
	if code := exitOf(t, holder); code != 128+int(syscall.SIGKILL) {
		t.Errorf("holder: exit %d, want %d", code, 128+int(syscall.SIGKILL))
	}
	return killed
}
