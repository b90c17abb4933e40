package main

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/supervisor"
)

// runExit maps how a run ended to fencerun's exit (SPEC.md's table):
// an error carrying the code, and what to say when there is something to
// say. conflict is -E's code for a lease not acquired.
func runExit(o fenced.Outcome, conflict int) error {
	switch o.End {
	case fenced.Exited:
		if o.Status.Signal != 0 {
			return exitCode(128 + int(o.Status.Signal))
		}
		return exitCode(o.Status.Code)
	case fenced.Interrupted:
		return fail(128+int(o.Signal), "interrupted by %s", unix.SignalName(o.Signal))
	case fenced.NotAcquired:
		return fail(conflict, "%v", o.Err)
	case fenced.NotStarted:
		return notStarted(o.Err)
	case fenced.FenceBroken:
		return exitCode(supervisor.ExitFenceBroken)
	case fenced.Cancelled, fenced.HandedOver:
		return exitCode(supervisor.ExitStopped)
	case fenced.Stuck:
		return exitCode(supervisor.ExitStuck)
	case fenced.TimedOut:
		return exitCode(supervisor.ExitTimeout)
	}
	return fail(supervisor.ExitFailed, "%v", o.Err)
}

// notStarted is a command that could not be started: 127 not found, 126
// not executable, 125 when fencerun could not fork.
func notStarted(err error) error {
	var ee *supervisor.ExecError
	if errors.As(err, &ee) {
		return fail(ee.Code(), "%v", err)
	}
	return fail(supervisor.ExitFailed, "%v", err)
}
