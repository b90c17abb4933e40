package supervisor

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Under systemd socket activation LISTEN_PID names the process the sockets
// (LISTEN_FDS of them, from fd 3) are for. When it names this process, the
// command is the one they are meant for, and it must see its own pid there;
// but the command's pid is known only after the fork, and Go runs nothing
// of ours between fork and exec. So Start then runs this program again, as
// a trampoline (argv[0] trampolineName), in the command's process: it sets
// LISTEN_PID to its own pid, which the command keeps, and execs the
// command. It runs from this package's init, before the program's main,
// so it works in any program that uses Start.
const trampolineName = "fencerun-activation-trampoline"

func init() {
	if len(os.Args) >= 3 && os.Args[0] == trampolineName {
		os.Exit(trampoline(os.Args[1], os.Args[2:]))
	}
}

// activated reports whether env hands sockets to this process.
func activated(env []string) bool {
	pid, ok := getenv(env, "LISTEN_PID")
	return ok && pid == strconv.Itoa(os.Getpid())
}

// viaTrampoline is the path and argv that run the trampoline for the
// command path with argv.
func viaTrampoline(path string, argv []string) (string, []string) {
	return "/proc/self/exe", append([]string{trampolineName, path}, argv...)
}

// trampoline execs path with argv, LISTEN_PID naming this process, and the
// descriptors this process was passed still open. It returns only if the
// exec failed: the exit code.
func trampoline(path string, argv []string) int {
	env := os.Environ()
	for i, kv := range env {
		if _, ok := strings.CutPrefix(kv, "LISTEN_PID="); ok {
			env[i] = "LISTEN_PID=" + strconv.Itoa(os.Getpid())
		}
	}
	for _, fd := range inherited {
		// findInherited marked them close-on-exec in this process too.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			fmt.Fprintf(os.Stderr, "fencerun: socket activation: keeping fd %d open: %v\n", fd, err)
			return 125 // fencerun's own failure (SPEC.md, exit codes)
		}
	}
	err := syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "fencerun: %s: %v\n", path, err)
	// The trampoline is a process of its own and exits by itself: with the
	// codes of SPEC.md that the parent would have given for this failure.
	if err == syscall.ENOENT {
		return 127
	}
	return 126
}
