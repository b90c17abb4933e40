package supervisor

import (
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ignoredAtStart is the set of signals this process ignored when this
// package was initialised, before main and before any os/signal.Notify,
// asked of the kernel one signal at a time (rt_sigaction without a new
// action), which is what /proc/self/status's SigIgn is made from. It
// shows what the caller ignored only for the signals the Go runtime leaves
// alone at start (untouched), so only those are asked: every other signal
// the runtime takes over before main, and an ignored SIGPIPE, SIGTERM,
// SIGQUIT, SIGUSR1... is lost (README: what the command is given).
var ignoredAtStart = readSigIgn()

// untouched are the signals whose disposition the Go runtime leaves as the
// caller set it when that is SIG_IGN: SIGHUP and SIGINT (which
// os/signal.Ignored reports too), and the job control signals.
var untouched = []syscall.Signal{syscall.SIGHUP, syscall.SIGINT,
	syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}

func readSigIgn() uint64 {
	if strings.HasPrefix(runtime.GOARCH, "mips") {
		return readStatusSigIgn() // its struct sigaction begins with the flags
	}
	var mask uint64
	for _, sig := range untouched {
		if handler(uintptr(sig)) == sigIgn {
			mask |= 1 << (sig - 1)
		}
	}
	return mask
}

// sigIgn is SIG_IGN, the handler of an ignored signal.
const sigIgn = 1

// handler is the handler the kernel has for sig (SIG_DFL 0, SIG_IGN 1, or
// a function's address); 0 where it cannot be read. The kernel's struct
// sigaction begins with the handler on every architecture but MIPS, and
// is at most five words (handler, flags, the restorer where there is one,
// a 64-bit mask).
func handler(sig uintptr) uintptr {
	var old [8]uintptr
	const sigsetSize = 8 // the kernel's sigset_t: 64 signals
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), sigsetSize, 0, 0); e != 0 {
		return 0
	}
	return old[0]
}

// readStatusSigIgn is SigIgn as /proc/self/status shows it.
func readStatusSigIgn() uint64 {
	b, err := readProcFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return mask
		}
	}
	return 0
}

// CallerIgnored reports whether this process's caller ignored sig (nohup,
// trap ”), as far as the Go runtime lets a program see it. A signal it
// reports must not be caught (os/signal.Notify): uncaught it stays ignored,
// and the command inherits it ignored; caught, the command gets it at its
// default.
func CallerIgnored(sig syscall.Signal) bool {
	return sig >= 1 && sig <= 64 && ignoredAtStart&(1<<(uint(sig)-1)) != 0
}
