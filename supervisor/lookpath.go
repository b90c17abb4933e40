package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecError says why the command could not be run. Path is the command as
// given when it was not found in PATH, else the file that was tried.
type ExecError struct {
	Path string
	// Err is the cause: exec.ErrNotFound when a PATH search found nothing,
	// else the errno of stat, access, fork or execve (ENOENT, EACCES,
	// EISDIR, ENOEXEC, EAGAIN...).
	Err     error
	Failure ExecFailure
}

func (e *ExecError) Error() string { return fmt.Sprintf("supervisor: %s: %v", e.Path, e.Err) }
func (e *ExecError) Unwrap() error { return e.Err }

// ExecFailure says which way a command could not be run; the exit code
// each gets is the caller's to decide.
type ExecFailure int

const (
	// NotFound: nothing there, or nothing in PATH (the shell's 127).
	NotFound ExecFailure = iota + 1
	// NotExecutable: found, but a directory, without execute permission,
	// or refused by execve (the shell's 126).
	NotExecutable
	// NoFork: this process could not fork (EAGAIN, ENOMEM, EMFILE,
	// ENFILE): the wrapper's failure, not the command's.
	NoFork
)

// defaultPath is what execvp(3) searches when PATH is unset
// (confstr(_CS_PATH) on glibc).
const defaultPath = "/bin:/usr/bin"

// LookPath resolves name as execvp(3) and a shell do, with the PATH of env:
// a name with a slash is used as it is; otherwise the first executable
// regular file in PATH wins (an empty or relative entry is the working
// directory, as for execvp). Anything found in PATH that cannot be
// executed, a directory included (so `.`), is a 126 when nothing executable
// is found after it, as for env(1) and timeout(1): execvp(3) remembers the
// EACCES that execve gives for both.
func LookPath(name string, env []string) (string, error) {
	if name == "" {
		return "", &ExecError{Path: name, Err: exec.ErrNotFound, Failure: NotFound}
	}
	if strings.Contains(name, "/") {
		return name, checkExecutable(name)
	}
	path, ok := getenv(env, "PATH")
	if !ok {
		path = defaultPath
	}
	var denied error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		file := dir + "/" + name
		err := checkExecutable(file)
		if err == nil {
			return file, nil
		}
		var ee *ExecError
		if denied == nil && errors.As(err, &ee) && ee.Failure == NotExecutable {
			denied = err
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", &ExecError{Path: name, Err: exec.ErrNotFound, Failure: NotFound}
}

// checkExecutable tells 127 (nothing there) from 126 (a directory, or no
// execute permission for this process).
func checkExecutable(file string) error {
	fi, err := os.Stat(file)
	if err != nil {
		failure := NotExecutable
		if errors.Is(err, os.ErrNotExist) {
			failure = NotFound
		}
		return &ExecError{Path: file, Err: errnoOf(err), Failure: failure}
	}
	if fi.IsDir() {
		return &ExecError{Path: file, Err: syscall.EISDIR, Failure: NotExecutable}
	}
	if err := unix.Faccessat(unix.AT_FDCWD, file, unix.X_OK, unix.AT_EACCESS); err != nil {
		return &ExecError{Path: file, Err: err, Failure: NotExecutable}
	}
	return nil
}

// errnoOf strips the *PathError so that ExecError names the path once.
func errnoOf(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func getenv(env []string, key string) (string, bool) {
	// The first entry wins, as for getenv(3) in the command.
	for _, e := range env {
		if k, v, ok := strings.Cut(e, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
