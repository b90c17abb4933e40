package supervisor

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The trampoline is this program run again (argv[0] trampolineName) in
// the command's process, to do there what must be done between fork and
// exec, where Go runs nothing of ours; it then execs the command. It runs
// from this package's init, before the program's main, so it works in any
// program that uses Start. Its jobs, either or both:
//
//   - Socket activation: LISTEN_PID names the process that LISTEN_FDS
//     sockets (from fd 3) are for. When it names this process, the
//     command is the one they are meant for and must see its own pid
//     there, known only after the fork: the trampoline sets it.
//   - The death watch (deathwatch_linux.go): for a command whose exec
//     clears its Pdeathsig, the trampoline, which still has it, writes
//     its pid and start time to the watcher before it execs the command,
//     so that no moment passes in which a SIGKILL of this process leaves
//     the command unwatched.
const trampolineName = "fencerun-trampoline"

func init() {
	if len(os.Args) >= 4 && os.Args[0] == trampolineName {
		os.Exit(trampoline(os.Args[1], os.Args[2], os.Args[3:]))
	}
}

// activated reports whether env hands sockets to this process.
func activated(env []string) bool {
	pid, ok := getenv(env, "LISTEN_PID")
	return ok && pid == strconv.Itoa(os.Getpid())
}

// viaTrampoline is the path and argv that run the trampoline for the
// command path with argv: listen says whether to set LISTEN_PID, and
// watch is the descriptor of the death watcher's pipe in the command's
// process, or -1.
func viaTrampoline(path string, argv []string, listen bool, watch int) (string, []string) {
	jobs := "watch=" + strconv.Itoa(watch)
	if listen {
		jobs += ",listen"
	}
	return "/proc/self/exe", append([]string{trampolineName, jobs, path}, argv...)
}

// trampoline does its jobs and execs path with argv, and the descriptors
// this process was passed still open. It returns only if it failed: the
// exit code.
func trampoline(jobs, path string, argv []string) int {
	env := os.Environ()
	for job := range strings.SplitSeq(jobs, ",") {
		if fd, ok := strings.CutPrefix(job, "watch="); ok && fd != "-1" {
			if err := tellWatcher(fd); err != nil {
				fmt.Fprintf(os.Stderr, "fencerun: the death watcher: %v\n", err)
				return 125 // fencerun's own failure (SPEC.md, exit codes)
			}
		}
		if job == "listen" {
			for i, kv := range env {
				if strings.HasPrefix(kv, "LISTEN_PID=") {
					env[i] = "LISTEN_PID=" + strconv.Itoa(os.Getpid())
				}
			}
		}
	}
	for _, fd := range inherited {
		// findInherited marked them close-on-exec in this process too.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			fmt.Fprintf(os.Stderr, "fencerun: keeping fd %d open: %v\n", fd, err)
			return 125
		}
	}
	err := syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "fencerun: %s: %v\n", path, err)
	// The trampoline is a process of its own and exits by itself: with the
	// codes of SPEC.md that the parent gives for the same failure of its
	// fork (Process.fork). The path was found (LookPath), so an ENOENT
	// now is a missing interpreter or a file just removed: 126, not 127.
	switch err {
	case syscall.EAGAIN, syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE:
		return 125
	}
	return 126
}

// tellWatcher writes this process's pid and start time to the watcher's
// pipe at descriptor fd, closes it, and drops it from inherited: the
// command never has it.
func tellWatcher(fd string) error {
	n, err := strconv.Atoi(fd)
	if err != nil {
		return fmt.Errorf("bad descriptor %q", fd)
	}
	inherited = slices.DeleteFunc(inherited, func(i int) bool { return i == n })
	defer unix.Close(n)
	q, err := readProc(os.Getpid())
	if err != nil {
		return err
	}
	_, err = unix.Write(n, fmt.Appendf(nil, "%d %d\n", q.pid, q.start))
	return err
}
