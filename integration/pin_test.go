package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// cpusAllowed is a thread's or process's Cpus_allowed_list, as /proc shows
// it ("0-1", "3").
func cpusAllowed(statusPath string) string {
	b, err := os.ReadFile(statusPath)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// wrapperThreadsOnOneCPU is the one CPU every thread of pid is bound to,
// or "" while they are not.
func wrapperThreadsOnOneCPU(pid int) string {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	one := ""
	for _, st := range tasks {
		cpus := cpusAllowed(st)
		if cpus == "" || strings.ContainsAny(cpus, ",-") || one != "" && cpus != one {
			return ""
		}
		one = cpus
	}
	return one
}

// TestTheHoldRunsOnOneCPU: once the hold is on one P (internal/cli
// holdOnOneProc, a second after the command started), every thread of the
// wrapper is bound to one CPU (P4: no wake-up across CPUs a renewal), and
// the command is not: it keeps the CPUs its caller had, as does what it
// starts later. SIGTERM still reaches it and the wrapper exits 143.
func TestTheHoldRunsOnOneCPU(t *testing.T) {
	mine := cpusAllowed("/proc/self/status")
	if !strings.ContainsAny(mine, ",-") {
		t.Skipf("this process may use only CPU %s: nothing to bind", mine)
	}
	s := newSandbox(t)
	c := s.start(s.fencerun("holder", "run", "--key", "k", "--ttl", "3s", "--",
		"sh", "-c", `sh -c 'echo $$ > later.tmp && mv later.tmp later; exec sleep 1000' & echo $$ > pid.tmp && mv pid.tmp pid; wait`))
	command, err := strconv.Atoi(strings.TrimSpace(waitFile(t, s.path("pid"))))
	if err != nil {
		t.Fatal(err)
	}
	var one string
	if err := waitFor(func() bool { one = wrapperThreadsOnOneCPU(c.Process.Pid); return one != "" }); err != nil {
		t.Fatalf("the wrapper's threads were never all bound to one CPU: %v", err)
	}
	if got := cpusAllowed("/proc/" + strconv.Itoa(command) + "/status"); got != mine {
		t.Errorf("the command may use CPUs %q, want the caller's %q (the wrapper's: %s)", got, mine, one)
	}
	later, err := strconv.Atoi(strings.TrimSpace(waitFile(t, s.path("later"))))
	if err != nil {
		t.Fatal(err)
	}
	if got := cpusAllowed("/proc/" + strconv.Itoa(later) + "/status"); got != mine {
		t.Errorf("a process the command started may use CPUs %q, want the caller's %q", got, mine)
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, c); code != 128+int(syscall.SIGTERM) {
		t.Errorf("wrapper exit %d after SIGTERM, want %d", code, 128+int(syscall.SIGTERM))
	}
}
