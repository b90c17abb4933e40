package integration

// Waiting costs nothing (P8, issue 21): a queued waiter sleeps until the
// one event that can make it the next holder, and does nothing else.

import (
	"fmt"
	"os"
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
