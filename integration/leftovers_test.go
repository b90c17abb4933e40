package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// S1/S2: a holder that dies while it stops a dead predecessor's leftovers
// passes them on: the next holder stops them before its command starts.
func TestLeftoversOutliveAHolderThatDiedStoppingThem(t *testing.T) {
	t.Run("key", func(t *testing.T) { leftoversChain(t, "--key", "job") })
	t.Run("resident", func(t *testing.T) { leftoversChain(t, "--resident", "app.db") })
}

// killedLeaving runs fencerun with args (as log) on a command that runs
// first, then leaves a process that left its group and ignores TERM, and
// SIGKILLs the wrapper; it returns that leftover's pid.
func (s *sandbox) killedLeaving(log, first string, args ...string) int {
	s.t.Helper()
	w := s.start(s.fencerun(log, append(args, "--", "sh", "-c", first+
		`setsid sh -c 'trap "" TERM; echo $$ > leftover.tmp; mv leftover.tmp leftover; while :; do sleep 0.05; done' & sleep 1000`)...))
	waitFile(s.t, s.path("leftover"))
	b, _ := os.ReadFile(s.path("leftover"))
	leftover, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := w.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
	exitOf(s.t, w)
	return leftover
}

func leftoversChain(t *testing.T, lease, name string) {
	t.Parallel()
	s := newSandbox(t)
	// A leaves a process that left its group and ignores TERM.
	leftover := s.killedLeaving("a", "", "run", lease, name)

	// B takes over and starts stopping A's leftover, which ignores TERM,
	// with a long grace; it dies in the middle of that.
	bw := s.start(s.fencerun("b", "--log-level", "info", "run", lease, name, "--grace", "10m", "--", "touch", "b-ran"))
	if err := waitFor(func() bool {
		log, _ := os.ReadFile(s.path("b.log"))
		return strings.Contains(string(log), "stopping its leftovers")
	}); err != nil {
		t.Fatal("B never started stopping A's leftovers")
	}
	if err := bw.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	exitOf(t, bw)
	if !alive(leftover) {
		t.Fatal("A's leftover died with B: the scenario did not happen")
	}

	// C must stop A's leftover before its own command runs.
	code := s.run("c", "run", lease, name, "--grace", "1s", "--", "sh", "-c",
		fmt.Sprintf(`if kill -0 %d 2>/dev/null && [ "$(awk '{print $3}' /proc/%d/stat)" != Z ]; then echo ALIVE > c-saw; else echo gone > c-saw; fi`, leftover, leftover))
	if code != 0 {
		t.Fatalf("C: exit %d", code)
	}
	if saw := waitFile(t, s.path("c-saw")); strings.TrimSpace(saw) != "gone" {
		t.Errorf("C's command ran while A's leftover %d was alive", leftover)
	}
	if _, err := os.Stat(s.path("b-ran")); err == nil {
		t.Error("B's command ran although B was killed before starting it")
	}
	_ = syscall.Kill(leftover, syscall.SIGKILL)
}

// M2, M1, S1: a dead exclusive holder's leftovers, which the holder after
// it (A) is still stopping, keep every other holder's command from
// starting: B, shared beside A's shared hold (or in the free slot beside
// A's of --slots 2), used to take a slot of its own and start at once,
// beside the exclusive tree. The chaos test's rare OVERLAP was this. The
// check lock is on a descriptor the whole tree inherits, so B's command
// finds the leftover whenever it runs beside it.
func TestLeftoversBeingStoppedKeepOtherHoldersOut(t *testing.T) {
	t.Run("shared", func(t *testing.T) { leftoversBeside(t, "--shared") })
	t.Run("slots", func(t *testing.T) { leftoversBeside(t, "--slots", "2") })
}

func leftoversBeside(t *testing.T, kind ...string) {
	t.Parallel()
	s := newSandbox(t)
	check := func(me, how string) string {
		return `exec 9>>check; flock ` + how + ` -n 9 || { echo "` + me + ` ran beside a holder it excludes" >> overlap; exit 99; }; `
	}
	// X, exclusive, leaves a process that left its group, ignores TERM
	// and holds the check lock exclusively.
	leftover := s.killedLeaving("x", check("X", "-x"), "run", "--key", "job")
	t.Cleanup(func() { _ = syscall.Kill(leftover, syscall.SIGKILL) })

	// A takes X's slot and stops X's leftover, which ignores TERM, with a
	// grace longer than the test.
	args := func(name, grace string, more ...string) []string {
		a := append([]string{"run", "--key", "job", "--name", name, "--grace", grace}, kind...)
		return append(append(a, more...), "--", "sh", "-c", check(name, "-s")+`echo `+name+` >> ran`)
	}
	a := s.start(s.fencerun("a", args("A", "10m")...))
	if err := waitFor(func() bool {
		log, _ := os.ReadFile(s.path("a.log"))
		return strings.Contains(string(log), "stopping its leftovers")
	}); err != nil {
		t.Fatal("A never started stopping X's leftovers")
	}
	if !alive(leftover) {
		t.Fatal("X's leftover is gone already: the scenario did not happen")
	}

	// B finds a slot free beside A. It must not run its command before
	// X's leftover is gone: it stops it too (its grace is short).
	if code := s.run("b", args("B", "0.1", "--no-wait")...); code != 0 {
		t.Errorf("B: exit %d, want 0", code)
	}
	goneAtExit(t, "X's leftover, once B exited", leftover)
	_ = syscall.Kill(leftover, syscall.SIGKILL) // else A waits out its grace
	if code := exitOf(t, a); code != 0 {
		t.Errorf("A: exit %d, want 0", code)
	}
	s.noOverlap()
	if ran, _ := os.ReadFile(s.path("ran")); len(strings.Fields(string(ran))) != 2 {
		t.Errorf("commands that ran: %q, want A and B", ran)
	}
}
