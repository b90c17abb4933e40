package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/store"
)

// parse parses args as fencerun's command line, with its Validate hooks.
func parse(t *testing.T, args ...string) (*CLI, error) {
	t.Helper()
	var cli CLI
	k, err := newParser(&cli, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Parse(args)
	return &cli, err
}

// refused checks a parse's err: a refusal naming each of the
// |-separated words of refuse, or no error when refuse is empty. It
// reports whether the command line was refused.
func refused(t *testing.T, err error, refuse string) bool {
	t.Helper()
	if refuse == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil {
		t.Fatalf("accepted, want a refusal naming %s", refuse)
	}
	for _, w := range strings.Split(refuse, "|") {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not name %s", err, w)
		}
	}
	return true
}

// M1, M2: --slots, --shared and --exclusive, typed or exported; what
// contradicts itself or is out of range is refused (125, naming the
// flags or the range) before anything is opened.
func TestKindFlags(t *testing.T) {
	for _, v := range []string{"FENCERUN_SLOTS", "FENCERUN_SHARED", "FENCERUN_EXCLUSIVE", "FENCERUN_KEY", "FENCERUN_TICK"} {
		unsetenv(t, v)
	}
	res := t.TempDir() + "/app.db"
	for _, tc := range []struct {
		env    []string // NAME=VALUE
		args   []string // between run and -- true
		slots  int
		shared bool
		given  bool   // the command gets FENCERUN_SLOT
		refuse string // the refusal names these, |-separated
	}{
		{args: []string{"--key", "k"}, slots: 1},
		{args: []string{"--key", "k", "--slots", "3"}, slots: 3, given: true},
		{args: []string{"--key", "k", "--slots", "1"}, slots: 1, given: true},
		{args: []string{"--key", "k", "--slots", "1024"}, slots: 1024, given: true},
		{args: []string{"--key", "k", "-s"}, slots: 1, shared: true},
		{args: []string{"--key", "k", "--shared"}, slots: 1, shared: true},
		{args: []string{"--key", "k", "-x"}, slots: 1},
		{env: []string{"FENCERUN_SLOTS=4"}, args: []string{"--key", "k"}, slots: 4, given: true},
		// What is typed beats what is exported.
		{env: []string{"FENCERUN_SHARED=1"}, args: []string{"--key", "k", "-x"}, slots: 1},
		{env: []string{"FENCERUN_EXCLUSIVE=1"}, args: []string{"--key", "k", "-s"}, slots: 1, shared: true},
		{env: []string{"FENCERUN_SLOTS=4"}, args: []string{"--key", "k", "-s"}, slots: 1, shared: true},
		{env: []string{"FENCERUN_SHARED=true"}, args: []string{"--key", "k", "--slots", "2"}, slots: 2, given: true},
		{args: []string{"--key", "k", "-s", "-x"}, refuse: "--shared|--exclusive"},
		{args: []string{"--key", "k", "--exclusive", "--shared"}, refuse: "--shared|--exclusive"},
		{env: []string{"FENCERUN_SHARED=1", "FENCERUN_EXCLUSIVE=1"}, args: []string{"--key", "k"}, refuse: "--shared|--exclusive"},
		{args: []string{"--key", "k", "--shared", "--slots", "2"}, refuse: "--shared|--slots"},
		{args: []string{"--key", "k", "--slots", "1", "-s"}, refuse: "--shared|--slots"},
		{env: []string{"FENCERUN_SHARED=1", "FENCERUN_SLOTS=3"}, args: []string{"--key", "k"}, refuse: "--shared|--slots"},
		{args: []string{"--key", "k", "--slots", "2", "-x"}, refuse: "--exclusive|--slots 2"},
		{env: []string{"FENCERUN_EXCLUSIVE=1", "FENCERUN_SLOTS=3"}, args: []string{"--key", "k"}, refuse: "--exclusive|--slots 3"},
		{env: []string{"FENCERUN_SLOTS=4"}, args: []string{"--key", "k", "-x"}, slots: 1},
		{env: []string{"FENCERUN_EXCLUSIVE=1"}, args: []string{"--key", "k", "--slots", "3"}, slots: 3, given: true},
		{args: []string{"--key", "k", "--slots", "1", "-x"}, slots: 1, given: true},
		{args: []string{"--key", "k", "--slots", "0"}, refuse: "--slots 0|1 to 1024"},
		{args: []string{"--key", "k", "--slots", "1025"}, refuse: "--slots 1025|1 to 1024"},
		{args: []string{"--key", "k", "--slots=-3"}, refuse: "--slots -3|1 to 1024"},
		{args: []string{"--key", "k", "--slots", "two"}, refuse: "--slots"},
		{args: []string{"--resident", res, "--slots", "2"}, refuse: "--slots|resident"},
		{args: []string{"--resident", res, "-s"}, refuse: "--shared|resident"},
		{args: []string{"--resident", res, "--slots", "1"}, slots: 1, given: true},
	} {
		t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
			for _, kv := range tc.env {
				name, value, _ := strings.Cut(kv, "=")
				t.Setenv(name, value)
			}
			cli, err := parse(t, append(append([]string{"run"}, tc.args...), "--", "true")...)
			if refused(t, err, tc.refuse) {
				return
			}
			r := cli.Run
			if r.Slots != tc.slots || r.Shared != tc.shared || r.slotsGiven != tc.given {
				t.Errorf("slots %d, shared %v, FENCERUN_SLOT %v; want %d, %v, %v", r.Slots, r.Shared, r.slotsGiven, tc.slots, tc.shared, tc.given)
			}
		})
	}
}

// A refusal of the flags is exit 125, and nothing is created.
func TestKindRefusalExits125(t *testing.T) {
	dir := t.TempDir() + "/state"
	for _, args := range [][]string{
		{"--dir", dir, "run", "--key", "k", "-s", "-x", "--", "true"},
		{"--dir", dir, "run", "--key", "k", "--slots", "2", "--shared", "--", "true"},
		{"--dir", dir, "run", "--key", "k", "--slots", "0", "--", "true"},
		{"--dir", dir, "release", "k", "--force", "--slot", "1", "--pid", "2"},
		{"--dir", dir, "cancel", "k", "--slot", "1", "--pid", "2"},
	} {
		if code := Main(args, Etcd{}); code != exitFailed {
			t.Errorf("%q: exit %d, want %d", args, code, exitFailed)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("a refused command line created %s", dir)
	}
}

// M3: release and cancel pick one holder with --slot or --pid, never
// both; and FENCERUN_SLOT, which a fenced command is given, is not
// read as --slot (a release from inside a slot's command revokes
// every holder unless told otherwise).
func TestPickFlags(t *testing.T) {
	for _, v := range []string{"FENCERUN_HOLDER_SLOT", "FENCERUN_HOLDER_PID"} {
		unsetenv(t, v)
	}
	t.Setenv("FENCERUN_SLOT", "2")
	for _, tc := range []struct {
		args   []string
		which  store.Which
		refuse string
	}{
		{args: []string{"release", "k", "--force"}},
		{args: []string{"cancel", "k"}},
		{args: []string{"release", "k", "--force", "--slot", "0"}, which: store.Which{Slot: ptr(0)}},
		{args: []string{"cancel", "k", "--slot", "3", "--wait", "1m"}, which: store.Which{Slot: ptr(3)}},
		{args: []string{"release", "k", "--force", "--pid", "4242"}, which: store.Which{PID: 4242}},
		{args: []string{"cancel", "k", "--pid", "4242"}, which: store.Which{PID: 4242}},
		{args: []string{"release", "k", "--force", "--slot", "1", "--pid", "4242"}, refuse: "--slot|--pid"},
		{args: []string{"cancel", "k", "--slot", "1", "--pid", "4242"}, refuse: "--slot|--pid"},
		{args: []string{"release", "k", "--force", "--slot", "1024"}, refuse: "--slot 1024|0 to 1023"},
		{args: []string{"cancel", "k", "--slot=-1"}, refuse: "--slot -1|0 to 1023"},
		{args: []string{"release", "k", "--force", "--pid=-5"}, refuse: "--pid -5"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cli, err := parse(t, tc.args...)
			if refused(t, err, tc.refuse) {
				return
			}
			got := cli.Release.which()
			if tc.args[0] == "cancel" {
				got = cli.Cancel.which()
			}
			if slotText(got.Slot) != slotText(tc.which.Slot) || got.PID != tc.which.PID {
				t.Errorf("picks slot %s, pid %d; want slot %s, pid %d", slotText(got.Slot), got.PID, slotText(tc.which.Slot), tc.which.PID)
			}
		})
	}
}

func ptr(n int) *int { return &n }

func slotText(n *int) string {
	if n == nil {
		return "none"
	}
	return fmt.Sprint(*n)
}

// FENCERUN_SLOT is the lease's slot when the run gave --slots (0 for
// --slots 1), and absent for a shared or a plain exclusive run, also
// when an enclosing slot run gave this process one.
func TestCommandEnvSlot(t *testing.T) {
	t.Setenv("FENCERUN_SLOT", "7") // from an enclosing run
	key := "k"
	for _, tc := range []struct {
		run  RunCmd
		slot int
		want string // "" for none
	}{
		{RunCmd{Key: &key, Slots: 4, slotsGiven: true}, 2, "FENCERUN_SLOT=2"},
		{RunCmd{Key: &key, Slots: 1, slotsGiven: true}, 0, "FENCERUN_SLOT=0"},
		{RunCmd{Key: &key, Slots: 1}, 0, ""},
		{RunCmd{Key: &key, Slots: 1, Shared: true}, -1, ""},
	} {
		env := tc.run.commandEnv(slotLease{slot: tc.slot}, "FENCERUN_TICK=x")
		var got []string
		for _, kv := range env {
			if strings.HasPrefix(kv, "FENCERUN_SLOT=") {
				got = append(got, kv)
			}
		}
		var want []string
		if tc.want != "" {
			want = []string{tc.want}
		}
		if !slices.Equal(got, want) {
			t.Errorf("slots %d given %v shared %v: env has %q, want %q", tc.run.Slots, tc.run.slotsGiven, tc.run.Shared, got, want)
		}
	}
}

// slotLease is a lease in a slot, as commandEnv reads it.
type slotLease struct {
	store.Lease
	slot int
}

func (l slotLease) Key() string   { return "k" }
func (l slotLease) Fence() uint64 { return 9 }
func (l slotLease) Slot() int     { return l.slot }
func (l slotLease) Env() []string { return nil }

// A backend's refusal of a claim whose slots differ from the key's
// holders' (store.ErrSlots) ends the run with 125 and the backend's
// words.
func TestSlotsMismatchExits125(t *testing.T) {
	err := fmt.Errorf("%w: the key's holder (pid 12) has --slots 3; this run asks for --slots 4", store.ErrSlots)
	got := runExit(fenced.Outcome{End: fenced.Failed, Err: err}, 75, 0)
	var coded interface{ ExitCode() int }
	if !errors.As(got, &coded) || coded.ExitCode() != exitFailed {
		t.Fatalf("runExit = %v, want exit %d", got, exitFailed)
	}
	if !strings.Contains(got.Error(), "has --slots 3; this run asks for --slots 4") {
		t.Errorf("runExit says %q, want the backend's words", got)
	}
}
