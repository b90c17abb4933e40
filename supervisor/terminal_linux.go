package supervisor

import (
	"runtime"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// controllingTerminal returns a descriptor of this process's controlling
// terminal, whether this process is in its foreground or not, or -1 when
// it has none (systemd, cron, CI, ssh without -t).
func controllingTerminal() int {
	fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// inForeground reports whether this process's group is the foreground
// group of tty: a shell's foreground job, not one started with & or
// continued with bg.
func inForeground(tty int) bool {
	pgrp, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// setForeground makes pgrp the foreground group of tty. A background group
// that changes the foreground gets SIGTTOU unless the calling thread
// blocks it, so it is blocked on this goroutine's thread meanwhile.
func setForeground(tty, pgrp int, log hclog.Logger) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var block, old unix.Sigset_t
	sig := uint(unix.SIGTTOU) - 1
	block.Val[sig/64] |= 1 << (sig % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &block, &old); err != nil {
		log.Warn("cannot block SIGTTOU to change the terminal's foreground", "error", err)
		return
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	if err := unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, pgrp); err != nil {
		log.Warn("cannot change the terminal's foreground group", "pgrp", pgrp, "error", err)
	}
}

// giveBackTerminal makes this process's group the foreground group of tty
// again, when the command's group (cmdGroup) has it, or, if the command
// was given the foreground (gave), a group that is gone (a job of a shell
// run as the command). Any other foreground group is left alone: after
// bg, or for a job started with &, it is the shell's.
func giveBackTerminal(tty, cmdGroup int, gave bool, log hclog.Logger) {
	fg, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	if err != nil || fg == unix.Getpgrp() {
		return // no longer our controlling terminal, or already ours
	}
	if fg != cmdGroup && (!gave || unix.Kill(-fg, 0) != unix.ESRCH) {
		return
	}
	setForeground(tty, unix.Getpgrp(), log)
}
