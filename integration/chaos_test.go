package integration

// The chaos test: wrappers on one key while a chaos goroutine SIGKILLs,
// SIGSTOPs (and later SIGCONTs) them and revokes the lease, checking S1,
// S2 and S4 under interleavings no hand-written test would think of. The
// random pauses are the scenario; every wait for an outcome is on a
// process, bounded by the guard.

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
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

// chaosCheck takes the check lock of file with flock's how (-x, or -s
// for a shared holder) or writes the wrapper's id in the OVERLAP record,
// then appends the command's fence and id to fences: with one holder at
// a time, the order of that file is the order in which commands ran.
func chaosCheck(file, how string) string {
	return `exec 9>>` + file + `; flock ` + how + ` -n 9 || { echo "OVERLAP fence=$FENCERUN_FENCE id=$CHAOS_ID" >> overlap; exit 99; }; ` +
		`echo "$FENCERUN_FENCE $CHAOS_ID" >> fences; `
}

// chaosBodies are what commands do once they hold the check lock: run a
// while, leave a background process in the group, leave one that escaped
// the group with setsid, or end at once. Leftovers hold the check lock
// through fd 9 until they are stopped.
var chaosBodies = []string{
	`sleep 0.3`,
	`sleep 1000 & sleep 0.2`,
	`setsid sleep 1000 & sleep 0.1`,
	`sleep 0.02`,
}

// chaosStubborn is a body whose leftover ignores the stop signal: its
// stopper waits out the grace, and a holder that started beside that
// stopper meanwhile (it once did) finds its check lock taken.
const chaosStubborn = `(trap "" TERM; exec sleep 1000) & sleep 0.2`

// chaosExits are the exit codes a wrapper may end with under chaos: the
// commands' own 0, 75 when --wait ran out or -n found the key busy, 76 when
// the fence broke (revoked, or stopped past its TTL), 137 when SIGKILLed.
// 99 is a command that found the check lock taken, reported as OVERLAP.
var chaosExits = map[int]bool{0: true, 75: true, 76: true, 99: true, 128 + int(syscall.SIGKILL): true}

// chaos is one run of the test: the wrappers alive, the ones stopped, and
// a journal of what happened, shown when the test fails.
type chaos struct {
	s       *sandbox
	t       *testing.T
	began   time.Time
	ttl     string       // of every wrapper's lease
	kind    string       // chaosConfig.kind
	bodies  []string     // chaosBodies, and chaosStubborn if asked
	allowed map[int]bool // exits the chaos may cause

	mu      sync.Mutex
	nextID  int
	running map[int]*exec.Cmd
	stopped map[int]bool
	exits   map[int]int
	actions map[string]int
	journal []string
	suspect []int // wrappers whose logs a failure shows
}

// chaosDuration is FENCERUN_CHAOS_MINUTES, else the short default run.
func chaosDuration(t *testing.T) time.Duration {
	v := os.Getenv("FENCERUN_CHAOS_MINUTES")
	if v == "" {
		return 5 * time.Second
	}
	m, err := strconv.ParseFloat(v, 64)
	if err != nil || m <= 0 {
		t.Fatalf("FENCERUN_CHAOS_MINUTES=%q: want a positive number of minutes", v)
	}
	return time.Duration(m * float64(time.Minute))
}

// chaosSeed is FENCERUN_CHAOS_SEED, else the time.
func chaosSeed(t *testing.T) uint64 {
	v := os.Getenv("FENCERUN_CHAOS_SEED")
	if v == "" {
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("FENCERUN_CHAOS_SEED=%q: %v", v, err)
	}
	return seed
}

func TestChaos(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosConfig{ttl: "1s", final: []string{"-n"}, stubborn: true})
}

// The chaos on a key of --slots 2 (M1, M3): a check lock a slot, which a
// dead holder's leftovers keep until the next holder of its slot has
// stopped them; the final run, exclusive, stops every slot's.
func TestChaosSlots(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosConfig{ttl: "1s", final: []string{"-n"}, kind: "slots", stubborn: true})
}

// The chaos on shared and exclusive holders of one key (M2): the check
// lock is taken shared by a shared holder, so an exclusive one beside a
// holder, or beside one's leftovers, is an OVERLAP.
func TestChaosShared(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosConfig{ttl: "1s", final: []string{"-n"}, kind: "shared", stubborn: true})
}

// chaosConfig is what differs between backends: the leases' TTL, how the
// final run waits for the dead holders' leases, exits that chaos may also
// cause, and another agitator run beside the one of wrappers (the etcd
// test's, of members) until the deadline, with its own random source.
type chaosConfig struct {
	ttl   string
	final []string
	exits []int
	more  func(rng *rand.Rand, deadline time.Time)
	// kind is "" for exclusive holds, "slots" for --slots 2, "shared"
	// for shared and exclusive holds at random.
	kind string
	// stubborn adds chaosStubborn to the bodies (the etcd run, whose
	// stopped trees' sessions and TTLs differ, goes without it).
	stubborn bool
}

func runChaos(t *testing.T, cfg chaosConfig) {
	const (
		key   = "chaos"
		slots = 5
	)
	d, seed := chaosDuration(t), chaosSeed(t)
	// A replay repeats the choices, not the timing of the processes.
	t.Logf("chaos for %v, seed %d (replay the choices with FENCERUN_CHAOS_SEED=%d)", d, seed, seed)
	c := &chaos{s: newSandbox(t), t: t, began: time.Now(), ttl: cfg.ttl, kind: cfg.kind, allowed: maps.Clone(chaosExits),
		running: map[int]*exec.Cmd{}, stopped: map[int]bool{}, exits: map[int]int{}, actions: map[string]int{}, bodies: chaosBodies}
	if cfg.stubborn {
		c.bodies = append(slices.Clone(chaosBodies), chaosStubborn)
	}
	if err := os.Mkdir(c.s.path("logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.report)
	deadline := c.began.Add(d)

	// Before any slot runs: they read it.
	for _, code := range cfg.exits {
		c.allowed[code] = true
	}
	var wg sync.WaitGroup
	for slot := range slots {
		rng := rand.New(rand.NewPCG(seed, uint64(slot)+1))
		wg.Go(func() { c.slot(rng, key, deadline, d) })
	}
	if cfg.more != nil {
		rng := rand.New(rand.NewPCG(seed, slots+1))
		wg.Go(func() { cfg.more(rng, deadline) })
	}
	c.agitate(rand.New(rand.NewPCG(seed, 0)), key, deadline, d)
	wg.Wait()

	c.s.noOverlap()
	c.checkFences()
	// A killed holder's leftovers are the next holder's to stop (S2); the
	// final run is that next holder for the last one.
	c.logf("wrappers done; live before the final run: %v", c.s.survivors())
	final := append(append([]string{"run", "--key", key}, cfg.final...), "--", "true")
	if code := c.s.run("final", final...); code != 0 {
		t.Errorf("final %v: exit %d, want 0", final, code)
	}
	c.s.nothingLeft("after the chaos and the final run")

	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("%d wrappers; exits %v; chaos %v", c.nextID, c.exits, c.actions)
	if c.exits[0] == 0 {
		t.Errorf("no command ran to its end: the chaos tested nothing")
	}
}

// slot runs wrappers one after another until the deadline: most wait for
// the key, some give up at once when it is busy.
func (c *chaos) slot(rng *rand.Rand, key string, deadline time.Time, d time.Duration) {
	maxRuns := int(d/(5*time.Millisecond)) + 1
	for n := 0; n < maxRuns && time.Now().Before(deadline); n++ {
		args := []string{"run", "--key", key, "--ttl", c.ttl, "--grace", "1s"}
		if rng.IntN(10) < 3 {
			args = append(args, "-n")
		} else {
			args = append(args, "--wait", "3s")
		}
		check := chaosCheck("check.lock", "-x")
		switch {
		case c.kind == "slots":
			args = append(args, "--slots", "2")
			check = chaosCheck("check.$FENCERUN_SLOT", "-x")
		case c.kind == "shared" && rng.IntN(3) > 0:
			args = append(args, "--shared")
			check = chaosCheck("check.lock", "-s")
		}
		body := c.bodies[rng.IntN(len(c.bodies))]
		c.runWrapper(append(args, "--", "sh", "-c", check+body))
		// Pacing, so that -n runs on a busy key do not spin.
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
	}
}

// runWrapper runs one wrapper to its end and records how it ended.
func (c *chaos) runWrapper(args []string) {
	c.mu.Lock()
	id := c.nextID
	c.nextID++
	c.mu.Unlock()
	log, err := os.OpenFile(c.logPath(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Error(err)
		return
	}
	defer log.Close()
	cmd := fencerun(c.s.state, args...)
	cmd.Env = append(cmd.Env, c.s.mark, "CHAOS_ID="+strconv.Itoa(id),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Dir = c.s.work
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Error(err)
		return
	}
	c.logf("w%d pid %d: %s", id, cmd.Process.Pid, strings.Join(args, " "))
	c.mu.Lock()
	c.running[id] = cmd
	c.mu.Unlock()

	code := c.wait(id, cmd)

	c.mu.Lock()
	delete(c.running, id)
	c.exits[code]++
	if !c.allowed[code] {
		c.suspect = append(c.suspect, id)
		c.t.Errorf("wrapper w%d exited %d, not one of the exits chaos can cause", id, code)
	}
	c.mu.Unlock()
	c.logf("w%d exit %d", id, code)
}

// wait is exitOf for a goroutine other than the test's: it reports rather
// than stops the test.
func (c *chaos) wait(id int, cmd *exec.Cmd) int {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(guard):
		c.t.Errorf("wrapper w%d did not exit within %v", id, guard)
		_ = cmd.Process.Kill()
		err = <-done
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	c.t.Errorf("wrapper w%d: %v", id, err)
	return -1
}

// agitate is the chaos: until the deadline, at random intervals, it
// SIGKILLs a wrapper, SIGSTOPs one for a random pause (sometimes past the
// TTL of 1s) before its SIGCONT, or revokes the lease with release --force.
// Every stopped wrapper is continued before it returns.
func (c *chaos) agitate(rng *rand.Rand, key string, deadline time.Time, d time.Duration) {
	windDown := make(chan struct{})
	var pauses sync.WaitGroup
	defer func() {
		close(windDown)
		pauses.Wait()
	}()
	maxActions := int(d/(30*time.Millisecond)) + 1
	for n := 0; n < maxActions && time.Now().Before(deadline); n++ {
		time.Sleep(time.Duration(30+rng.IntN(270)) * time.Millisecond)
		roll := rng.IntN(100)
		if roll >= 75 {
			c.count("release --force")
			code := c.release(key)
			c.logf("release --force: exit %d", code)
			if code != 0 {
				c.t.Errorf("release %s --force: exit %d, want 0", key, code)
			}
			continue
		}
		id, cmd := c.pick(rng, roll >= 30)
		if cmd == nil {
			continue
		}
		if roll < 30 {
			c.count("SIGKILL")
			c.logf("w%d: SIGKILL", id)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			continue
		}
		pause := time.Duration(100+rng.IntN(2400)) * time.Millisecond
		c.count("SIGSTOP")
		c.mu.Lock()
		c.stopped[id] = true
		c.mu.Unlock()
		c.logf("w%d: SIGSTOP for %v", id, pause)
		_ = cmd.Process.Signal(syscall.SIGSTOP)
		pauses.Go(func() {
			select {
			case <-time.After(pause):
			case <-windDown:
			}
			c.mu.Lock()
			delete(c.stopped, id)
			c.mu.Unlock()
			c.logf("w%d: SIGCONT", id)
			_ = cmd.Process.Signal(syscall.SIGCONT)
		})
	}
}

// pick chooses a running wrapper at random, in id order so that a seed
// replays the choice; unstopped only, it skips the stopped ones.
func (c *chaos) pick(rng *rand.Rand, unstopped bool) (int, *exec.Cmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []int
	for id := range c.running {
		if !unstopped || !c.stopped[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	slices.Sort(ids)
	id := ids[rng.IntN(len(ids))]
	return id, c.running[id]
}

// release runs `fencerun release key --force` and returns its exit code.
func (c *chaos) release(key string) int {
	log, err := os.OpenFile(c.s.path("logs/release.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Error(err)
		return -1
	}
	defer log.Close()
	cmd := fencerun(c.s.state, "release", key, "--force")
	cmd.Env = append(cmd.Env, c.s.mark)
	cmd.Dir = c.s.work
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Error(err)
		return -1
	}
	return c.wait(-1, cmd)
}

// checkFences: every command that ran got its own fence (S4), and with
// one holder at a time (S1), in increasing order of fence.
func (c *chaos) checkFences() {
	b, err := os.ReadFile(c.s.path("fences"))
	if err != nil {
		c.t.Errorf("no command ever ran: %v", err)
		return
	}
	seen := map[uint64]string{}
	var prev uint64
	for l := range strings.Lines(string(b)) {
		fence, id, _ := strings.Cut(strings.TrimSpace(l), " ")
		f, err := strconv.ParseUint(fence, 10, 64)
		if err != nil || f == 0 {
			c.t.Errorf("fences: line %q: not a fence", l)
			continue
		}
		if other, dup := seen[f]; dup {
			c.t.Errorf("fence %d was given to w%s and to w%s", f, other, id)
			c.suspectIDs(other, id)
		}
		seen[f] = id
		if f <= prev && c.kind == "" {
			c.t.Errorf("w%s ran with fence %d after a command with fence %d", id, f, prev)
		}
		prev = f
	}
	c.logf("%d commands ran, fences up to %d", len(seen), prev)
}

// suspectIDs marks wrappers, by their decimal ids, whose logs a failure
// shows.
func (c *chaos) suspectIDs(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range ids {
		if id, err := strconv.Atoi(s); err == nil {
			c.suspect = append(c.suspect, id)
		}
	}
}

func (c *chaos) count(action string) {
	c.mu.Lock()
	c.actions[action]++
	c.mu.Unlock()
}

// logf adds a line to the journal, stamped with the time since the start.
func (c *chaos) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", time.Since(c.began).Seconds()) + fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.journal = append(c.journal, line)
	c.mu.Unlock()
}

func (c *chaos) logPath(id int) string { return c.s.path(fmt.Sprintf("logs/w%d.log", id)) }

// report shows, for a failed test, the journal's tail and the logs of the
// wrappers a failure names (unexpected exits, duplicate fences, OVERLAP),
// or else of the last few.
func (c *chaos) report() {
	if !c.t.Failed() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	journal := c.journal
	if len(journal) > 400 {
		journal = journal[len(journal)-400:]
	}
	c.t.Logf("journal (last %d of %d lines):\n%s", len(journal), len(c.journal), strings.Join(journal, "\n"))
	ids := slices.Clone(c.suspect)
	if b, err := os.ReadFile(c.s.path("overlap")); err == nil {
		for l := range strings.Lines(string(b)) {
			if _, id, ok := strings.Cut(strings.TrimSpace(l), " id="); ok {
				if n, err := strconv.Atoi(id); err == nil {
					ids = append(ids, n)
				}
			}
		}
	}
	if len(ids) == 0 {
		for id := max(0, c.nextID-8); id < c.nextID; id++ {
			ids = append(ids, id)
		}
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		b, _ := os.ReadFile(c.logPath(id))
		c.t.Logf("--- w%d.log:\n%s", id, bytes.TrimSpace(b))
	}
	b, _ := os.ReadFile(c.s.path("fences"))
	c.t.Logf("--- fences (fence, wrapper):\n%s", b)
}
