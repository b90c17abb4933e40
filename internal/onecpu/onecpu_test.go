package onecpu

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func allowed(t *testing.T, status string) string {
	t.Helper()
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s: no Cpus_allowed_list", status)
	return ""
}

// After Bind every thread of the process, and one made after it, may run
// on one CPU only, the same for all. (This test process stays bound.)
func TestBindBindsEveryThreadToOneCPU(t *testing.T) {
	if cpus := allowed(t, "/proc/self/status"); !strings.ContainsAny(cpus, ",-") {
		t.Skipf("this process may use only CPU %s: nothing to show", cpus)
	}
	Bind()
	// A thread made after Bind: a goroutine locked to its thread while
	// another is locked too needs an M of its own.
	made := make(chan struct{})
	release := make(chan struct{})
	runtime.LockOSThread()
	go func() {
		runtime.LockOSThread()
		close(made)
		<-release
	}()
	<-made
	defer close(release)
	defer runtime.UnlockOSThread()

	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) < 2 {
		t.Fatalf("threads %v (%v): want several", tasks, err)
	}
	one := ""
	for _, st := range tasks {
		cpus := allowed(t, st)
		if strings.ContainsAny(cpus, ",-") || one != "" && cpus != one {
			t.Errorf("%s may use CPUs %q, want the one CPU of the others (%q)", st, cpus, one)
		}
		one = cpus
	}
}
