package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A command's cgroup is made before its lease is held (Prepare), so a
// wrapper SIGKILLed while it waits leaves it, empty, in its own cgroup
// directory, where no record names it. SweepCgroups removes such cgroups;
// each run sweeps its cgroup's directory once its command has started
// (sweepAfterStart), off the lease's path, and prune sweeps its own.
//
// A cgroup is removed only when all of these hold:
//   - its name is fencerun's, fencerun-PID-<16 hex digits>;
//   - nothing holds its lock: a run holds an exclusive flock(2) on its
//     cgroup's directory from just after making it until it removes it
//     (createCgroup), so a live run's prepared cgroup is never taken,
//     whatever pid namespace or clock it has;
//   - PID, its maker, is gone (or a zombie), or is a later process that
//     reused the pid: one that started reuseMargin after the directory was
//     last changed, as /proc/PID/stat and CLOCK_BOOTTIME tell (an older
//     one, or one whose start cannot be read, keeps it);
//   - rmdir(2) succeeds, which it does only for an empty cgroup with no
//     cgroups below it. Nothing is ever signalled here.
//
// A dead holder's cgroup that a record names may go too once it is empty;
// StopLeftovers takes a cgroup that is gone for one with nothing in it.
// Where /proc is another pid namespace's the pids in the names mean
// nothing, and nothing is swept.

// reuseMargin is how long after a cgroup's directory was last changed a
// live process with its maker's pid must have started to be taken for a
// later one: it absorbs the rounding of the start time to clock ticks and
// a wall clock stepped by less than it since (a cgroup's times are wall
// clock times, a process's start is boot time).
const reuseMargin = 10 * time.Second

// swept is the directories sweepAfterStart swept.
var swept sync.Map

// sweepAfterStart sweeps dir in the background, once per process.
func sweepAfterStart(dir string) {
	if _, done := swept.LoadOrStore(dir, true); !done {
		go SweepCgroups(dir)
	}
}

// SweepCgroups removes from dir the empty cgroups of fencerun runs that
// are gone (see above), and returns the paths it removed. Its error is
// only that dir could not be read.
func SweepCgroups(dir string) ([]string, error) {
	if foreignProc() {
		return nil, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("supervisor: reading cgroup directory %s: %w", dir, err)
	}
	var removed []string
	for _, e := range ents {
		pid, ok := cgroupMaker(e.Name())
		if !ok || !e.IsDir() || pid == os.Getpid() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if removeDeadCgroup(path, pid) {
			removed = append(removed, path)
		}
	}
	return removed, nil
}

// Sweep is SweepCgroups of this process's own cgroup directory, where
// its runs make their commands' cgroups.
func (h *Hierarchy) Sweep() ([]string, error) { return SweepCgroups(h.dir) }

// lockCgroup takes the lock of a cgroup just made, through its
// descriptor. Only a sweep that took this run for dead (its pid of another
// namespace) holds it meanwhile, for a few system calls; after 100 tries
// the cgroup goes unlocked, kept by its maker's pid alone.
func lockCgroup(fd int) {
	for range 100 {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || err != unix.EWOULDBLOCK && err != unix.EINTR {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// cgroupMaker is the pid in a cgroup name of fencerun's form (NewPath).
func cgroupMaker(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return 0, false
	}
	p, h, ok := strings.Cut(rest, "-")
	if !ok || len(h) != 16 || strings.Trim(h, "0123456789abcdef") != "" {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != p {
		return 0, false
	}
	return pid, true
}

// removeDeadCgroup removes the cgroup at path, made by pid, if nothing
// holds its lock, pid is gone or reused, and it is empty.
func removeDeadCgroup(path string, pid int) bool {
	// The maker first: a live run in its mkdir-to-flock window is not
	// made to wait for the lock (createCgroup).
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || !makerGone(pid, time.Unix(st.Mtim.Unix())) {
		return false
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd) // the lock goes with it, after the rmdir
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // a live run's
	}
	// The lock is the directory's we opened: a run whose cgroup another
	// sweep removed makes it again at the same path (createCgroup), and
	// that one is not ours to remove.
	var fst, now unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || unix.Lstat(path, &now) != nil || fst.Ino != now.Ino || fst.Dev != now.Dev {
		return false
	}
	return unix.Rmdir(path) == nil // EBUSY: populated, or with cgroups below
}

// makerGone reports whether the process that made a cgroup last changed
// at changed is gone: no process has its pid, or a zombie has, or one that
// started reuseMargin after changed.
func makerGone(pid int, changed time.Time) bool {
	q, err := readProc(pid)
	if errors.Is(err, errNoProc) {
		return true
	}
	if err != nil {
		return false
	}
	if q.dead() {
		return true // a zombie: the maker, dead, or a reused pid's
	}
	hz := clockTicks()
	if hz == 0 {
		return false
	}
	var real, boot unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME, &real) != nil || unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
		return false
	}
	bootedAt := time.Unix(real.Unix()).Add(-time.Duration(boot.Nano()))
	started := bootedAt.Add(time.Duration(q.start) * time.Second / time.Duration(hz))
	return started.After(changed.Add(reuseMargin))
}

// clockTicks is the kernel's clock ticks per second (USER_HZ, the unit of
// /proc/PID/stat's start time), from the auxiliary vector; 0 when unknown.
var clockTicks = sync.OnceValue(func() uint64 {
	const atClktck = 17 // AT_CLKTCK
	av, err := unix.Auxv()
	if err != nil {
		return 0
	}
	for _, kv := range av {
		if kv[0] == atClktck {
			return uint64(kv[1])
		}
	}
	return 0
})
