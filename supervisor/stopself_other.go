//go:build !amd64 && !arm64

package supervisor

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// stopSelf stops this process's group with SIGSTOP: where the layout of
// the kernel's struct sigaction is not known here, the default action of
// a caught stop signal cannot be put back (see stopself_linux.go). The
// shell sees the job stopped all the same, by another signal.
func stopSelf(sig syscall.Signal) (restore func(), err error) { return stopWith(0, sig) }

// stopWith is stopSelf with kill(2)'s target pid.
func stopWith(pid int, _ syscall.Signal) (restore func(), err error) {
	return func() {}, unix.Kill(pid, syscall.SIGSTOP)
}
