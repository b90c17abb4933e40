package supervisor

import (
	"strconv"
	"strings"
	"syscall"
)

// ignoredAtStart is SigIgn of /proc/self/status when this package was
// initialised, before main and before any os/signal.Notify. It shows what
// the caller ignored only for the signals the Go runtime leaves alone at
// start: SIGHUP and SIGINT (which os/signal.Ignored reports too), and
// SIGCONT, SIGTSTP, SIGTTIN and SIGTTOU. Every other signal the runtime
// takes over before main, and an ignored SIGPIPE, SIGTERM, SIGQUIT,
// SIGUSR1... is lost (README: what the command is given).
var ignoredAtStart = readSigIgn()

func readSigIgn() uint64 {
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
