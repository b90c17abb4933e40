package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// inherited are the descriptors from 3 on that this process's parent passed
// it open: open and not close-on-exec when this package is initialised,
// before main. Every descriptor the Go runtime and this program open is
// close-on-exec, so what is not was the caller's. Each is marked
// close-on-exec here, so that no other child of this process gets it, and
// Start gives it to the command at its own number.
var inherited = findInherited()

// findInherited lists, and marks close-on-exec, the descriptors from 3 on
// that are open without close-on-exec.
func findInherited() []int {
	var fds []int
	for _, fd := range openFds() {
		if fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // /proc/self/fd's own descriptor, or one of the runtime's
		}
		unix.CloseOnExec(fd)
		fds = append(fds, fd)
	}
	slices.Sort(fds)
	return fds
}

// openFds lists this process's descriptors: from /proc/self/fd, else (no
// /proc, as in a new pid namespace without its own) by asking each number
// below the descriptor limit.
func openFds() []int {
	if fds, err := procFds(); err == nil {
		return fds
	}
	var fds []int
	limit := uint64(1024)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		limit = min(rl.Cur, 1<<16)
	}
	for fd := range int(limit) {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}

// procFds lists /proc/self/fd by bare getdents, without os.ReadDir's
// set-up and sorting (P1, P4: this runs at every start). The list
// includes the descriptor it reads through.
func procFds() ([]int, error) {
	dfd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	var fds []int
	var names []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(dfd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	for _, name := range names {
		if fd, err := strconv.Atoi(name); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds, nil
}

// commandFiles is the descriptor table the command starts with: 0, 1 and
// 2 as they are (one closed here stays closed there), and every inherited
// descriptor at its own number; every other number is closed.
func commandFiles() []uintptr {
	n := 3
	if len(inherited) > 0 {
		n = inherited[len(inherited)-1] + 1
	}
	files := make([]uintptr, n)
	for i := range files {
		files[i] = ^uintptr(0)
	}
	for i := range 3 {
		if _, err := unix.FcntlInt(uintptr(i), unix.F_GETFD, 0); err == nil {
			files[i] = uintptr(i)
		}
	}
	for _, fd := range inherited {
		files[fd] = uintptr(fd)
	}
	return files
}

// errDescriptorLimit: a descriptor this process's parent passed on is too
// high for the open-file limit to start the command with it.
var errDescriptorLimit = errors.New("supervisor: an inherited descriptor does not fit under the open-file limit")

// descriptorsFit checks that the command can be started with every
// inherited descriptor at its own number: the fork moves its own error
// pipe above the highest descriptor passed on (syscall.forkAndExecInChild),
// so that one plus two must be below the open-file limit (the hard one,
// which Go raises the soft one to). Otherwise every start would fail with
// EBADF, which reads as a command that cannot be executed (126).
func descriptorsFit() error {
	if len(inherited) == 0 {
		return nil
	}
	high := inherited[len(inherited)-1]
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || uint64(high)+2 < rl.Cur {
		return nil
	}
	return fmt.Errorf("%w: descriptor %d is open, and the limit (ulimit -n) is %d: raise it to %d or more, or close the descriptor", errDescriptorLimit, high, rl.Cur, high+3)
}
