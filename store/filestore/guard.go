package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
)

// guardWait is how long a key's guard may stay busy before a command says
// who holds it (every command) or reads without it (status and list). A
// guard is held for one change of a key, microseconds, a few milliseconds
// when a first write is fsynced on a loaded disk: a second is a hundred
// times the longest seen and still a prompt answer for a person. Past it
// the holder is stopped (SIGSTOP, a debugger) or wedged, and may stay so
// for ever. Only tests change it.
var guardWait = time.Second

// lockGuard locks kd's guard with how, as LockFile. If it stays busy for
// guardWait, it logs who holds it and goes on waiting (op is what waits,
// for the message); or, with giveUp, it gives up the wait: it calls giveUp
// (the cancel of ctx) with a *guardStuck naming the holder, which the
// error it then returns wraps.
func (s *Store) lockGuard(ctx context.Context, kd dir, create bool, how int, op string, giveUp context.CancelCauseFunc) (int, error) {
	return kd.LockFileSlow(ctx, guardFile, create, how, guardWait, func(fd int) {
		if giveUp != nil {
			giveUp(&guardStuck{holder: lockHolder(fd)})
			return
		}
		s.log.Warn("waiting for the key's guard lock: "+op+" goes on once it is free", "path", kd.Join(guardFile), "held_by", lockHolder(fd))
	})
}

// guardStuck: a key's guard stayed busy for guardWait (lockGuard).
type guardStuck struct{ holder string }

func (e *guardStuck) Error() string {
	return "the key's guard lock is held by " + e.holder
}

// stuckGuard returns the holder's description if err is lockGuard's
// giving up, and ctx (the caller's, not the one given up) has not ended.
func stuckGuard(ctx context.Context, err error) string {
	var e *guardStuck
	if ctx.Err() == nil && errors.As(err, &e) {
		return e.holder
	}
	return ""
}

// lockHolder says who holds the exclusive flock on the file open as fd,
// as far as /proc shows: "pid N (stopped)", "(running)", "(sleeping)"...,
// or that it cannot tell.
func lockHolder(fd int) string {
	pid, err := statefs.FlockHolder(fd)
	if err != nil || pid == 0 {
		return "a process this /proc does not show"
	}
	return fmt.Sprintf("pid %d (%s)", pid, procRunState(pid))
}

// procRunState is the run state of pid from /proc/PID/stat, in words.
func procRunState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "state unknown"
	}
	// The state follows the command name's closing parenthesis.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return "state unknown"
	}
	switch data[i+2] {
	case 'T', 't':
		return "stopped"
	case 'D':
		return "in uninterruptible sleep"
	case 'Z':
		return "exited, not reaped"
	case 'R':
		return "running"
	}
	return "sleeping"
}

// lockGuardRead locks kd's guard shared for a reader (status, list). If it
// stays busy for guardWait, it gives up the wait and returns -1 and the
// holder's description (lockHolder): the caller then reads without the
// guard (unguardedLive). A guard that does not exist (never mutated) is
// fs.ErrNotExist, as LockFile's.
func (s *Store) lockGuardRead(ctx context.Context, kd dir) (int, string, error) {
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, err := s.lockGuard(gctx, kd, false, unix.LOCK_SH, "status", cancel)
	if holder := stuckGuard(ctx, err); holder != "" {
		return -1, holder, nil
	}
	return g, "", err
}

// unguardedLive reports whether live in the slot sd of kd is held, for a reader that
// could not take the guard (lockGuardRead). It must not probe the lock as
// ProbeLock does: a probe's LOCK_SH, however brief, makes an acquirer's
// LOCK_EX|LOCK_NB on a free live fail, so the acquirer would see a holder
// that is not there. Probes are harmless only under the guard, which
// excludes acquirers; here the guard's holder, which may be an acquirer
// that was merely slow, is not excluded. So it reads the kernel's lock
// table instead, which takes no lock and changes nothing anyone sees:
// exclusivity cannot be touched by a reader that writes nothing and
// locks nothing.
//
// The lock table does not show every lock: one taken in a pid namespace
// this /proc does not see, or on a file system whose inodes it names by
// another device than fstat does (an overlay whose upper layer is another
// file system). Its "not held" is believed only where it shows the lock
// the reader just waited a second for, the guard's; where it does not,
// the record's word stands (recorded: it names a holder), so that a live
// holder is never reported dead, its command as leftovers to be killed.
// A stale answer then errs towards "held", in an answer the caller marks
// as read without the guard.
func unguardedLive(kd, sd dir, recorded bool) (bool, error) {
	if !lockTableShows(kd, guardFile) {
		return recorded, nil
	}
	fd, err := sd.OpenFile(liveFile, unix.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	pid, err := statefs.FlockHolder(fd)
	if err != nil {
		return false, fmt.Errorf("filestore: read /proc/locks for %s: %w", sd.Join(liveFile), err)
	}
	return pid != 0, nil
}

// lockTableShows reports whether /proc/locks shows a holder of the lock on
// name in kd.
func lockTableShows(kd dir, name string) bool {
	fd, err := kd.OpenFile(name, unix.O_RDONLY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	pid, err := statefs.FlockHolder(fd)
	return err == nil && pid != 0
}
