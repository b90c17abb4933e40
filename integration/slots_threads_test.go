package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// threadsOf is the number of OS threads of process pid (/proc status).
func threadsOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "Threads:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no Threads in /proc/%d/status", pid)
	return 0
}

// M1, P8: a waiter at the head of a full --slots 16 key waits on every
// busy slot; once it takes one it must not keep a thread blocked on
// each of the others for as long as their holders hold (and woken by
// each of their releases): a holder that waited costs what one that did
// not costs.
func TestSlotsHeadWaitLeavesNoThreads(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	const n = 16
	hs := s.startSlots("pool", n)
	w := s.witness("pool", "w", n, "s", "--slots", strconv.Itoa(n))
	s.waitMany("pool", n, 1)
	s.letGo("h0")
	if code := exitOf(t, hs[0]); code != 0 {
		t.Errorf("h0 exited %d", code)
	}
	if slot, _ := s.running("w"); slot != "0" {
		t.Errorf("the waiter took slot %s, want 0", slot)
	}
	waited, control := threadsOf(t, w.Process.Pid), threadsOf(t, hs[1].Process.Pid)
	if waited > control+4 {
		t.Errorf("the holder that waited for one of %d slots has %d threads, one that did not %d: a thread per other slot stays blocked", n, waited, control)
	}
	os.WriteFile(s.path("go"), nil, 0o600)
	for _, c := range append(hs[1:], w) {
		exitOf(t, c)
	}
	s.noBad()
}
