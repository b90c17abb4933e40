package supervisor

import (
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// foregroundTerminal returns a descriptor of the terminal on fd 0 when it is
// this process's controlling terminal and this process's group is its
// foreground group (so not when run with &), else -1. The command's group
// is then given the foreground: the terminal's signals (Ctrl-C) reach the
// command, and it can read and write without SIGTTIN or SIGTTOU.
func foregroundTerminal() int {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if err != nil || pgrp != unix.Getpgrp() {
		return -1
	}
	// A copy, so that the foreground is given back to the same terminal
	// even if fd 0 changes meanwhile.
	fd, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1
	}
	return fd
}

// giveBackTerminal makes this process's group the foreground group of tty
// again. A background group that changes the foreground gets SIGTTOU,
// unless the calling thread blocks it: the caller must be locked to its
// OS thread.
func giveBackTerminal(tty int, log hclog.Logger) {
	pgrp := unix.Getpgrp()
	if fg, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP); err != nil || fg == pgrp {
		return // no longer our controlling terminal, or already ours
	}
	var block, old unix.Sigset_t
	sig := uint(unix.SIGTTOU) - 1
	block.Val[sig/64] |= 1 << (sig % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &block, &old); err != nil {
		log.Warn("cannot block SIGTTOU to take the terminal back", "error", err)
		return
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	if err := unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, pgrp); err != nil {
		log.Warn("cannot take the terminal's foreground back", "error", err)
	}
}
