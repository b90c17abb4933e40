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

func leftoversChain(t *testing.T, lease, name string) {
	t.Parallel()
	s := newSandbox(t)
	// A leaves a process that left its group and ignores TERM.
	a := s.start(s.fencerun("a", "run", lease, name, "--", "sh", "-c",
		`setsid sh -c 'trap "" TERM; echo $$ > leftover.tmp; mv leftover.tmp leftover; while :; do sleep 0.05; done' & sleep 1000`))
	waitFile(t, s.path("leftover"))
	b, _ := os.ReadFile(s.path("leftover"))
	leftover, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	exitOf(t, a)

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
