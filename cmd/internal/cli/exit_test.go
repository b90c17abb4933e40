package cli

import (
	"errors"
	"syscall"
	"testing"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

func TestRunExit(t *testing.T) {
	busy := fenced.NotAcquiredf("key k is busy")
	for _, tc := range []struct {
		name     string
		out      fenced.Outcome
		conflict int
		code     int
		says     string // the message, when there is one
	}{
		{"own code", fenced.Outcome{End: fenced.Exited, Status: supervisor.Status{Code: 7}}, 75, 7, ""},
		{"own zero", fenced.Outcome{End: fenced.Exited}, 75, 0, ""},
		{"died of a signal", fenced.Outcome{End: fenced.Exited, Status: supervisor.Status{Signal: syscall.SIGTERM}}, 75, 143, ""},
		{"signal while waiting", fenced.Outcome{End: fenced.Interrupted, Signal: syscall.SIGINT}, 75, 130, "interrupted by SIGINT"},
		{"busy", fenced.Outcome{End: fenced.NotAcquired, Err: busy}, 75, 75, "key k is busy"},
		{"busy with -E 0", fenced.Outcome{End: fenced.NotAcquired, Err: busy}, 0, 0, "key k is busy"},
		{"not found", fenced.Outcome{End: fenced.NotStarted, Err: &supervisor.ExecError{Path: "x", Err: syscall.ENOENT, Failure: supervisor.NotFound}}, 75, 127, "supervisor: x: no such file or directory"},
		{"not executable", fenced.Outcome{End: fenced.NotStarted, Err: &supervisor.ExecError{Path: "x", Err: syscall.EACCES, Failure: supervisor.NotExecutable}}, 75, 126, "supervisor: x: permission denied"},
		{"no fork", fenced.Outcome{End: fenced.NotStarted, Err: &supervisor.ExecError{Path: "x", Err: syscall.EAGAIN, Failure: supervisor.NoFork}}, 75, 125, "supervisor: x: resource temporarily unavailable"},
		// A cause fencerun set wins over the status the stopped command died with.
		{"fence broken", fenced.Outcome{End: fenced.FenceBroken, Status: supervisor.Status{Signal: syscall.SIGTERM}}, 75, 76, ""},
		{"cancelled", fenced.Outcome{End: fenced.Cancelled, Status: supervisor.Status{Code: 1}}, 75, 77, ""},
		{"handed over", fenced.Outcome{End: fenced.HandedOver}, 75, 77, ""},
		{"stuck", fenced.Outcome{End: fenced.Stuck, Status: supervisor.Status{Signal: syscall.SIGKILL}}, 75, 78, ""},
		{"timed out", fenced.Outcome{End: fenced.TimedOut, Status: supervisor.Status{Signal: syscall.SIGTERM}}, 75, 124, ""},
		{"failed", fenced.Outcome{End: fenced.Failed, Err: errors.New("disk full")}, 75, 125, "disk full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runExit(tc.out, tc.conflict, 0)
			var coded interface{ ExitCode() int }
			if !errors.As(err, &coded) || coded.ExitCode() != tc.code {
				t.Fatalf("runExit = %v, want exit %d", err, tc.code)
			}
			var quiet exitCode
			switch {
			case tc.says == "" && !errors.As(err, &quiet):
				t.Errorf("runExit says %q, want nothing besides the code", err)
			case tc.says != "" && err.Error() != tc.says:
				t.Errorf("runExit says %q, want %q", err, tc.says)
			}
		})
	}
}

func TestStatusExit(t *testing.T) {
	for state, want := range map[store.State]int{store.Held: 0, store.Stuck: 0, store.Free: 3, store.Expired: 4, store.Corrupt: 5} {
		if got := statusExit(state).(exitCode); int(got) != want {
			t.Errorf("status --exit-code of %s = %d, want %d", state, got, want)
		}
	}
}
