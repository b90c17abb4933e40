//go:build amd64 || arm64

package supervisor

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sigaction is the kernel's struct sigaction on amd64 and arm64.
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// stopSelf stops this process's group with sig, as the terminal would have
// stopped it had the command been in it, so that the shell sees the same
// job state (bash: "Stopped" for SIGTSTP, "Stopped (tty input)" for
// SIGTTIN). A stop signal the Go runtime catches does not stop (os/signal
// keeps its handler even after signal.Stop), so the default action is put
// back for the moment of the stop; restore, to call once this process has
// been continued, puts the runtime's handler back. Until then, the same
// signal sent again stops this process too, as it would without
// fencerun.
func stopSelf(sig syscall.Signal) (restore func(), err error) { return stopWith(0, sig) }

// stopWith is stopSelf with kill(2)'s target pid: 0, this process's group,
// or this process alone (stopAsDefault).
func stopWith(pid int, sig syscall.Signal) (restore func(), err error) {
	restore = func() {}
	if sig != syscall.SIGSTOP {
		var dfl, old sigaction // handler 0 is SIG_DFL
		if err := rtSigaction(sig, &dfl, &old); err != nil {
			return nil, err
		}
		restore = func() { _ = rtSigaction(sig, &old, nil) }
	}
	if err := unix.Kill(pid, sig); err != nil {
		restore()
		return nil, err
	}
	return restore, nil
}

func rtSigaction(sig syscall.Signal, act, old *sigaction) error {
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
