package supervisor

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A shell's kill of a stopped job sends SIGTERM, then SIGCONT, and both
// are pending when this process wakes; but os/signal may hand SIGCONT
// over first: each is taken by a thread of its own, and the thread that
// took SIGTERM may be preempted in its handler, before the runtime has it.
// Continued, the command would then read the terminal in the background
// and stop on SIGTTIN with the SIGTERM not forwarded, and the job would
// stay stopped (TestJobControlTermOfStoppedJob, under load).
//
// settleSignals waits, bounded by settleBound, until every signal the
// kernel gave this process before the call has reached os/signal's
// channels, so that forwardWaiting finds it:
//   - until none of them is pending in the kernel, nor held by a thread in
//     its handler (Go's handlers block every signal while they run, so such
//     a thread's SigBlk has them all), as /proc/self/task/*/status tell;
//   - then it sends itself a SIGCONT and waits for it on cont: the runtime
//     hands the signals it has over in increasing order, and every one that
//     is forwarded (S7) is lower than SIGCONT but SIGWINCH, so those it had
//     before are in their channels once SIGCONT is in cont.
//
// What drains cont after it is no business of the caller's: it is one
// more continue, which suspend's next stop drains before it stops.
func settleSignals(cont <-chan os.Signal) {
	deadline := time.Now().Add(settleBound)
	for signalsInFlight() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // no event tells of a handler's end
	}
	for len(cont) > 0 {
		<-cont
	}
	if unix.Kill(os.Getpid(), unix.SIGCONT) != nil {
		return
	}
	select {
	case <-cont:
	case <-time.After(time.Until(deadline) + settleBound/4):
	}
}

// settleBound bounds each wait of settleSignals: a thread preempted in a
// handler for longer leaves its signal to JobControl's later look.
const settleBound = 200 * time.Millisecond

// Forwarded are the signals fencerun forwards to the command's tree (S7).
// SIGALRM, SIGVTALRM and SIGXCPU are among them: fencerun sets no timer and
// uses little CPU, so one sent to it was sent with kill, for the command
// (timeout -s ALRM fencerun ...). SIGPIPE is not: it is what fencerun gets
// itself when its stderr's reader is gone, and it is caught and dropped so
// that a log line never kills it. Nor is SIGPROF: the Go runtime takes it
// for its profiler and never hands it to a program, so it is dropped.
var Forwarded = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGXCPU}

// forwardedMask is Forwarded as bits of the masks /proc shows (signal n is
// bit n-1); handlerMask those of them that the Go runtime never blocks in
// a thread (it may, for the others, while nothing is subscribed to them)
// but while a handler or one of its short windows with every signal
// blocked runs there.
var (
	handlerMask   uint64 = 1<<(unix.SIGHUP-1) | 1<<(unix.SIGINT-1) | 1<<(unix.SIGQUIT-1) | 1<<(unix.SIGTERM-1)
	forwardedMask        = func() (m uint64) {
		for _, s := range Forwarded {
			m |= 1 << (s - 1)
		}
		return m
	}()
)

// signalsInFlight reports whether a forwarded signal is pending for this
// process or one of its threads, or a thread runs a signal handler.
func signalsInFlight() bool {
	if b, err := readProcFile("/proc/self/status"); err == nil && statusMask(b, "ShdPnd:")&forwardedMask != 0 {
		return true
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false
	}
	for _, e := range ents {
		b, err := readProcFile("/proc/self/task/" + e.Name() + "/status")
		if err != nil {
			continue // the thread ended
		}
		if statusMask(b, "SigPnd:")&forwardedMask != 0 || statusMask(b, "SigBlk:")&handlerMask != 0 {
			return true
		}
	}
	return false
}

// statusMask is the hexadecimal mask on the line of /proc status b that
// starts with field; 0 when there is none.
func statusMask(b []byte, field string) uint64 {
	_, rest, ok := strings.Cut(string(b), "\n"+field)
	if !ok {
		return 0
	}
	line, _, _ := strings.Cut(rest, "\n")
	m, _ := strconv.ParseUint(strings.TrimSpace(line), 16, 64)
	return m
}
