package cli

import (
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pinToThisCPU binds every thread of this process to the CPU the calling
// thread runs on, for the rest of the hold (holdOnOneProc): a renewal is a
// chain of wake-ups between the runtime's threads (the poller, the thread
// running the one P, sysmon), and with the threads free to move, the
// kernel woke each on an idle CPU of its own, a wake-up across CPUs each
// time (P4). Processes started before are not changed (affinity is copied
// at fork, and the command was started earlier); threads made later
// inherit it. Best effort: a CPU that cannot be read or set (a cpuset that
// forbids it) leaves the threads as they are.
func pinToThisCPU() {
	var cpu uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return
	}
	var set unix.CPUSet
	set.Set(int(cpu))
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, name := range names {
		if tid, err := strconv.Atoi(name); err == nil {
			_ = unix.SchedSetaffinity(tid, &set)
		}
	}
}
