package cli

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/internal/errtext"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// Exit codes of the contract's table. This file is the one place that decides
// which of them fencerun exits with: runExit for a run's outcome,
// statusExit for status --exit-code, usage and fail for everything else,
// and exitOf for what main finally returns.
const (
	exitConflict    = 75  // the lease was not acquired (-E changes it)
	exitFenceBroken = 76  // revoked, taken over, or not renewed in time
	exitStopped     = 77  // cancelled, or handed over to a newer build
	exitStuck       = 78  // stopped ticking for --stuck-after
	exitTimeout     = 124 // ran past --timeout
	exitFailed      = 125 // fencerun itself failed
	exitCannotExec  = 126 // found but could not be executed
	exitNotFound    = 127 // not found
	exitSignal      = 128 // + N: died of, or interrupted by, signal N
)

// runExit maps how a run ended to fencerun's exit: an error carrying the
// code, and what to say when there is something to say. A cause set by
// fencerun wins over the status the stopped command died with. conflict
// is -E's code for a lease not acquired, onceExit --once-exit's for an ID
// done already.
func runExit(o fenced.Outcome, conflict, onceExit int) error {
	switch o.End {
	case fenced.Exited:
		if o.Status.Signal != 0 {
			return exitCode(exitSignal + int(o.Status.Signal))
		}
		return exitCode(o.Status.Code)
	case fenced.Killed:
		return exitCode(exitSignal + int(o.Signal)) // fenced said why
	case fenced.Interrupted:
		return &expectedError{code: exitSignal + int(o.Signal), err: fmt.Errorf("interrupted by %s", unix.SignalName(o.Signal))}
	case fenced.NotAcquired:
		return &expectedError{code: conflict, err: o.Err}
	case fenced.AlreadyDone:
		// Someone did it: one info line, silent at the default level, so
		// that cron mails nothing (O1).
		return &expectedError{code: onceExit, info: true, err: o.Err}
	case fenced.NotStarted:
		return notStarted(o.Err)
	case fenced.FenceBroken:
		return exitCode(exitFenceBroken)
	case fenced.Cancelled, fenced.HandedOver:
		return exitCode(exitStopped)
	case fenced.Stuck:
		return exitCode(exitStuck)
	case fenced.TimedOut:
		return exitCode(exitTimeout)
	}
	return fail(exitFailed, "%v", o.Err)
}

// notStarted is a command that could not be started: 127 not found, 126
// not executable, 125 when fencerun could not fork.
func notStarted(err error) error {
	var ee *supervisor.ExecError
	if errors.As(err, &ee) {
		switch ee.Failure {
		case supervisor.NotFound:
			return fail(exitNotFound, "%v", err)
		case supervisor.NotExecutable:
			return fail(exitCannotExec, "%v", err)
		}
	}
	return fail(exitFailed, "%v", err)
}

// statusExit is status --exit-code's: 0 held, 3 free, 4 expired, 5
// corrupt.
func statusExit(s store.State) error {
	return exitCode(map[store.State]int{store.Held: 0, store.Stuck: 0, store.Free: 3, store.Expired: 4, store.Corrupt: 5}[s])
}

// exitOf is the code fencerun exits with once a command ran and returned
// err, and the one line it logs: none for a code with nothing to say, a
// warning for an expected end (a conflict), an error for a failure.
func exitOf(err error, log hclog.Logger) int {
	if err == nil {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	var expected *expectedError
	if errors.As(err, &expected) {
		// Not a failure (cron mails every line): one warn line, and none
		// when -E chose what a conflict means.
		switch {
		case expected.info:
			log.Info(errtext.Sentence(err))
		case !expected.silent:
			log.Warn(errtext.Sentence(err))
		}
		return expected.code
	}
	log.Error(errtext.Sentence(err))
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return exitFailed
}

// exitError carries the exit code of a failure; kong and main honour
// ExitCode().
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// expectedError is an end that is not a failure: a lease not acquired
// (busy with -n or -w, or --wait ran out), or a wait a signal ended. It is
// logged at warn, so that -q silences it; silent, when -E said what a
// conflict means, it is not logged at all.
type expectedError struct {
	code   int
	silent bool
	info   bool // logged at info, not warn: an --once ID done already
	err    error
}

func (e *expectedError) Error() string { return e.err.Error() }
func (e *expectedError) Unwrap() error { return e.err }
func (e *expectedError) ExitCode() int { return e.code }

// exitCode is a run that ended with a code and nothing more to say (the
// command's own code, or 128+N).
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
func (c exitCode) ExitCode() int { return int(c) }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usage is a bad command line or flag value (B2): exit 125.
func usage(format string, args ...any) error {
	return fail(exitFailed, format, args...)
}
