package supervisor

import "syscall"

// Exit codes of SPEC.md. This file is the one place that maps an outcome of
// a run to the code fencerun exits with.
const (
	ExitConflict    = 75  // the lease was not acquired (-E changes it)
	ExitFenceBroken = 76  // revoked, taken over, or not renewed in time
	ExitStopped     = 77  // cancelled, or handed over to a newer build
	ExitStuck       = 78  // stopped ticking for --stuck-after
	ExitTimeout     = 124 // ran past --timeout
	ExitFailed      = 125 // fencerun itself failed
	ExitCannotExec  = 126 // found but could not be executed
	ExitNotFound    = 127 // not found
)

// Cause says why a command was stopped by fencerun rather than exiting by
// itself. The zero value means it was not stopped (or only forwarded a
// signal it received).
type Cause int

const (
	CauseNone     Cause = iota
	CauseLost           // fence broken
	CauseCancel         // `fencerun cancel`
	CauseHandover       // resident handover to a newer build
	CauseStuck          // watchdog
	CauseTimeout        // --timeout
)

// Status is how the command's direct child ended.
type Status struct {
	Code   int            // exit status when it exited
	Signal syscall.Signal // the signal it died of, else 0
}

// ExitCode maps the way a run ended to fencerun's exit code: a cause set by
// fencerun wins over the status the stopped command died with; otherwise
// the command's own code, or 128+N for death by signal N.
func ExitCode(c Cause, s Status) int {
	switch c {
	case CauseLost:
		return ExitFenceBroken
	case CauseCancel, CauseHandover:
		return ExitStopped
	case CauseStuck:
		return ExitStuck
	case CauseTimeout:
		return ExitTimeout
	}
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code
}
