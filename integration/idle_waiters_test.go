package integration

// Waiting costs nothing (P8, issue 21): a queued waiter sleeps until the
// one event that can make it the next holder, and does nothing else.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIdleWaitersDoNothing queues waiters behind a holder and counts
// their context switches over a few seconds at rest: a waiter that polls
// (a status read a second, as before issue 21) switches on every look; a
// sleeping one does not switch at all. One switch per waiter is allowed
// for whatever the Go runtime does on its own (a forced GC is every two
// minutes).
func TestIdleWaitersDoNothing(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	release := startHolder(t, s, "k")
	const n = 20
	var pids []int
	for i := range n {
		name := fmt.Sprintf("w%02d", i)
		c := s.start(s.fencerun("waiters", "run", "--key", "k", "--name", name, "--", "true"))
		pids = append(pids, c.Process.Pid)
		s.t.Cleanup(func() { exitOf(t, c) })
	}
	waitCount(t, s, "k", n)
	// The scenario: a queue at rest, after a second for the waiters'
	// start (their first look, the runtime's first collection) to end.
	time.Sleep(time.Second)
	before := switches(t, pids)
	time.Sleep(3 * time.Second)
	after := switches(t, pids)
	if d := after - before; d > n {
		t.Errorf("%d waiters at rest switched %d times in 3 s (want at most %d): they do work while they wait", n, d, n)
	}
	release()
}

// waitCount waits until key has n waiters.
func waitCount(t *testing.T, s *sandbox, key string, n int) {
	t.Helper()
	var last int
	if err := waitFor(func() bool { last = len(s.status(key).Waiters); return last == n }); err != nil {
		t.Fatalf("waiters of %s: want %d, last seen %d", key, n, last)
	}
}

// switches is the sum of the context switches, voluntary or not, of every
// thread of pids so far.
func switches(t *testing.T, pids []int) int {
	t.Helper()
	total := 0
	for _, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("pid %d: no threads", pid)
		}
		for _, st := range tasks {
			b, err := os.ReadFile(st)
			if err != nil {
				continue // a thread that ended
			}
			for _, line := range strings.Split(string(b), "\n") {
				k, v, ok := strings.Cut(line, ":")
				if ok && strings.HasSuffix(k, "ctxt_switches") {
					n, _ := strconv.Atoi(strings.TrimSpace(v))
					total += n
				}
			}
		}
	}
	return total
}

// TestManyWaitersInArrivalOrder queues a few hundred waiter processes
// (FENCERUN_WAITERS of them: 1,000 with `just waiters`) one by one behind a
// holder at TTL 3 s, and lets them drain: every command runs, one at a
// time, in arrival order (S10, P2), and no holder loses its lease to
// the queue (P8): counts, not times.
func TestManyWaitersInArrivalOrder(t *testing.T) {
	n := 300
	if v := os.Getenv("FENCERUN_WAITERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("FENCERUN_WAITERS=%q: want a count", v)
		}
	}
	s := newSandbox(t)
	holder := s.fencerun("holder", "run", "--key", "k", "--ttl", "3s", "--", "sh", "-c", `touch held; read x || true`)
	gate, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.start(holder)
	waitFile(t, s.path("held"))
	queue := filepath.Join(s.state, "keys", "k-k", "queue")
	var waiters []*exec.Cmd
	for i := range n {
		c := s.fencerun("waiters", "run", "--key", "k", "--ttl", "3s", "--",
			"sh", "-c", exclusive+`echo $0 >> order`, strconv.Itoa(i))
		c.Env = append(c.Env, "FENCERUN_LOG_LEVEL=warn")
		waiters = append(waiters, s.start(c))
		if err := waitFor(func() bool { return queued(queue) == i+1 }); err != nil {
			t.Fatalf("waiter %d never queued (%d in the queue)", i, queued(queue))
		}
	}
	// P8: at most 3 MiB Pss a waiter, the queue full and at rest.
	if pss := meanPss(t, waiters); pss > 3<<20 {
		t.Errorf("%d waiters: %.1f MiB Pss each, want at most 3 MiB", n, pss/(1<<20))
	}
	gate.Close()
	if code := exitOf(t, holder); code != 0 {
		t.Errorf("holder exited %d, want 0 (76: it lost its lease)", code)
	}
	lost := 0
	for _, c := range waiters {
		if exitOf(t, c) != 0 {
			lost++
		}
	}
	s.noOverlap()
	b, _ := os.ReadFile(s.path("order"))
	ran := strings.Fields(string(b))
	inversions := 0
	for i, w := range ran {
		if w != strconv.Itoa(i) {
			inversions++
		}
	}
	if lost != 0 || inversions != 0 || len(ran) != n {
		t.Errorf("%d waiters: %d commands ran, %d out of arrival order, %d waiters did not exit 0", n, len(ran), inversions, lost)
	}
}

// queued counts the entries in a key's queue directory.
func queued(dir string) int {
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if _, err := strconv.ParseUint(e.Name(), 10, 64); err == nil {
			n++
		}
	}
	return n
}

// TestIdleStandbyDoesNothing: a resident standby behind a live holder on
// this host sleeps until the holder releases, answers or exits; it looked
// again every second before (a safety net), and now switches no more than
// once at rest. Released, it takes the role at once.
func TestIdleStandbyDoesNothing(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	holder := s.fencerun("holder", "run", "--resident", "app.db", "--", "sh", "-c", `touch held; read x || true`)
	gate, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.start(holder)
	waitFile(t, s.path("held"))
	standby := s.start(s.fencerun("standby", "run", "--resident", "app.db", "--wait", "forever", "--", "touch", "standby-ran"))
	s.waitLog("standby", "waiting as a standby")
	time.Sleep(time.Second) // the scenario: a standby at rest, once started
	before := switches(t, []int{standby.Process.Pid})
	time.Sleep(3 * time.Second)
	if d := switches(t, []int{standby.Process.Pid}) - before; d > 1 {
		t.Errorf("a standby at rest switched %d times in 3 s (want at most 1): it does work while it waits", d)
	}
	gate.Close()
	if code := exitOf(t, holder); code != 0 {
		t.Errorf("holder exited %d, want 0", code)
	}
	if code := exitOf(t, standby); code != 0 {
		t.Errorf("standby exited %d, want 0", code)
	}
	waitFile(t, s.path("standby-ran"))
}

// meanPss is the mean proportional set size of the processes of cs, in
// bytes (/proc/PID/smaps_rollup).
func meanPss(t *testing.T, cs []*exec.Cmd) float64 {
	t.Helper()
	total := 0.0
	for _, c := range cs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", c.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
				total += kb * 1024
			}
		}
	}
	return total / float64(len(cs))
}
