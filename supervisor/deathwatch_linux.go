package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The direct child's Pdeathsig (S2: if this process is SIGKILLed, the
// command dies at once) does not survive an exec that changes credentials:
// the kernel clears it for a set-user-ID or set-group-ID program, or one
// with file capabilities (commit_creds). For such a command, a watcher
// keeps the promise: this program run again (argv[0] watcherName), in a
// session of its own, started before the command, that holds the read end
// of a pipe whose write end only this process has. The command starts
// through the trampoline (activation_linux.go), which still has its
// Pdeathsig and writes its pid and start time there before it execs the
// command; this process writes "done" once the command is reaped. An end
// of file without "done" means this process died: the watcher SIGKILLs
// the command, if it is still the recorded one.
//
// It does not cover a command that execs such a program later (sh -c
// 'exec sudo ...'): that one outlives this process's SIGKILL until the next
// holder stops it. Nor a command that made its real uid another one
// (sudo's setresuid): the watcher, as this process's user, may not signal
// it then.
const watcherName = "fencerun-deathwatch"

func init() {
	if len(os.Args) == 1 && os.Args[0] == watcherName {
		os.Exit(deathWatch(os.NewFile(3, "deathwatch")))
	}
}

// changesCredentials reports whether exec of path changes the credentials
// of a process of this one's, and with them clears its Pdeathsig: path is
// such a program, or a script whose interpreter ("#!", followed as the
// kernel does, up to 4 deep) is; the kernel takes the credentials from
// the program it finally runs.
func changesCredentials(path string) bool {
	for range 5 {
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil {
			return false
		}
		if st.Mode&unix.S_ISUID != 0 && int(st.Uid) != os.Geteuid() || st.Mode&unix.S_ISGID != 0 && int(st.Gid) != os.Getegid() {
			return true
		}
		if _, err := unix.Getxattr(path, "security.capability", nil); err == nil && os.Geteuid() != 0 {
			return true
		}
		var ok bool
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return false
		}
		if path, ok = interpreter(path); !ok {
			return false
		}
	}
	return false
}

// interpreter is the program that the "#!" line of the script at path
// names, read as the kernel reads it (binfmt_script: the first 256
// bytes, the name up to a blank or the line's end).
func interpreter(path string) (string, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	var buf [256]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n < 3 || string(buf[:2]) != "#!" {
		return "", false
	}
	line, _, _ := strings.Cut(string(buf[2:n]), "\n")
	name, _, _ := strings.Cut(strings.TrimLeft(line, " \t"), " ")
	name, _, _ = strings.Cut(name, "\t")
	return name, name != ""
}

// watcher is this process's end of a running watcher.
type watcher struct {
	pid int
	w   *os.File
}

// startWatcher starts a watcher, which waits for the command's pid.
func startWatcher() (*watcher, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("supervisor: starting the death watcher: %w", err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("supervisor: starting the death watcher: %w", err)
	}
	defer null.Close()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{watcherName}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), r.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("supervisor: starting the death watcher: %w", err)
	}
	return &watcher{pid: pid, w: w}, nil
}

// release tells the watcher the command is reaped, and reaps it.
func (wt *watcher) release() {
	if wt == nil {
		return
	}
	io.WriteString(wt.w, "done")
	wt.w.Close()
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(wt.pid, &ws, 0, nil); err != syscall.EINTR {
			return
		}
	}
}

// deathWatch is the watcher's life: the command's pid and start time from
// in, then "done", or an end of file: the command is killed.
func deathWatch(in *os.File) int {
	// A signal meant for the run (a terminal's, a group's) is not for it.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	r := bufio.NewReader(io.LimitReader(in, 128))
	var q proc
	if _, err := fmt.Fscanf(r, "%d %d\n", &q.pid, &q.start); err != nil {
		return 0 // this process died before the command started, or could not start it
	}
	rest, _ := io.ReadAll(r)
	if string(rest) == "done" {
		return 0
	}
	if err := signalProc(q, syscall.SIGKILL); err != nil {
		return 1
	}
	return 0
}
