// Package onecpu binds a process's threads to one CPU: what fencerun's
// hold does once it is on one Go P (internal/cli holdOnOneProc), and the
// bench's etcd floor with it (bench/etcdfloor).
//
// It guarantees that after Bind every thread of the process that existed
// then is bound to the CPU the calling thread was running on, and that
// threads made later inherit it (the kernel copies a thread's affinity to
// the threads and processes it creates). It does not change processes
// started before, and it is best effort: a CPU that cannot be read or set
// (a cpuset that forbids it) leaves the threads as they were, and a cpuset
// that later takes the CPU away resets the binding, as for any process.
package onecpu

import (
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Bind binds every thread of this process to the CPU the calling thread
// runs on. A renewal is a chain of wake-ups between the Go runtime's
// threads (the poller, the thread with the P, sysmon); with the threads
// free to move, the kernel woke each on an idle CPU of its own, a wake-up
// across CPUs each time (P4: docs/DESIGN.md, the third etcd pass).
func Bind() {
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
