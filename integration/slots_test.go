package integration

// Many holders of one key (M1-M5) end to end: the built binary, real
// processes and signals, on the file backend. Each command is a witness:
// it proves from inside that the holders it runs beside are allowed
// there, with kernel locks its whole tree holds until it is gone, so an
// overlap is caught whenever it happens, not only when the test looks.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// slotWitness is a command that checks its place from inside:
// sh witness.sh DIR NAME N RW. With N > 0 (--slots N) its FENCERUN_SLOT
// must be in 0..N-1 and no live command may hold that slot (flock -n on
// DIR/slot.S); with N = 0 it must have no FENCERUN_SLOT. RW is s (a
// shared or slot holder) or x (an exclusive one): an flock -RW -n on
// DIR/rw, which an exclusive holder beside any other fails. What fails
// goes to DIR/bad (exit 99). It records "NAME SLOT PID FENCE" in
// DIR/ran and in DIR/order its name, writes DIR/run.NAME ("SLOT PID")
// while it runs, and holds until DIR/go or DIR/go.NAME exists. The locks
// are on descriptors its whole tree inherits: held until the last of its
// processes is gone.
const slotWitness = `d=$1; me=$2; n=$3; rw=$4
bad() { echo "$me: $*" >> "$d/bad"; exit 99; }
if [ "$n" -gt 0 ]; then
	s=${FENCERUN_SLOT-none}
	case "$s" in ''|*[!0-9]*) bad "no slot ($s)";; esac
	[ "$s" -lt "$n" ] || bad "slot $s is not under $n"
	exec 8>>"$d/slot.$s"
	flock -n 8 || bad "slot $s is held by a live command"
else
	[ -z "${FENCERUN_SLOT+set}" ] || bad "FENCERUN_SLOT=$FENCERUN_SLOT without --slots"
	s=-
fi
exec 7>>"$d/rw"
flock -$rw -n 7 || bad "an flock -$rw beside a holder it excludes"
echo "$me $s $$ ${FENCERUN_FENCE:-$ETCD_LOCK_REV}" >> "$d/ran"
echo "$me" >> "$d/order"
echo "$s $$" > "$d/run.$me.tmp" && mv "$d/run.$me.tmp" "$d/run.$me"
while [ ! -e "$d/go" ] && [ ! -e "$d/go.$me" ]; do sleep 0.01; done
rm -f "$d/run.$me"
`

// waitMany waits until key has holders holders and waiters waiters, and
// every slot holder its slot: on etcd one admitted shows as a holder
// before it takes its slot, which it does once every one ahead has.
func (s *sandbox) waitMany(key string, holders, waiters int) keyStatus {
	s.t.Helper()
	var st keyStatus
	if err := waitFor(func() bool {
		st = s.status(key)
		for _, h := range st.Holders {
			if h.Kind == "slot" && h.Slot == nil {
				return false
			}
		}
		return len(st.Holders) == holders && len(st.Waiters) == waiters
	}); err != nil {
		s.t.Fatalf("%s never had %d holders and %d waiters; last %+v", key, holders, waiters, st)
	}
	return st
}

// witness starts a fencerun run of key with args that runs the witness
// as name (n slots, rw s or x).
func (s *sandbox) witness(key, name string, n int, rw string, args ...string) *exec.Cmd {
	s.t.Helper()
	args = append([]string{"run", "--key", key, "--name", name}, args...)
	args = append(args, "--", "sh", s.witnessFile(), s.work, name, strconv.Itoa(n), rw)
	return s.start(s.fencerun(name, args...))
}

// witnessFile is the path of the witness script, written on first use.
func (s *sandbox) witnessFile() string {
	s.t.Helper()
	path := s.path("witness.sh")
	if _, err := os.Stat(path); err != nil {
		if err := os.WriteFile(path, []byte(slotWitness), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	return path
}

// running waits until the witness name runs and returns its slot ("-"
// without --slots) and its shell's pid. A witness that found itself
// somewhere it must not be fails the test at once.
func (s *sandbox) running(name string) (string, int) {
	s.t.Helper()
	var run []byte
	if err := waitFor(func() bool {
		var err error
		run, err = os.ReadFile(s.path("run." + name))
		b, _ := os.ReadFile(s.path("bad"))
		return err == nil || strings.Contains(string(b), name+": ")
	}); err != nil {
		s.t.Fatalf("%s never ran", name)
	}
	if run == nil {
		b, _ := os.ReadFile(s.path("bad"))
		s.t.Fatalf("a witness ran where it must not:\n%s", b)
	}
	f := strings.Fields(string(run))
	if len(f) != 2 {
		s.t.Fatalf("run.%s: %q", name, f)
	}
	pid, _ := strconv.Atoi(f[1])
	return f[0], pid
}

// letGo lets the witness name end.
func (s *sandbox) letGo(names ...string) {
	s.t.Helper()
	for _, n := range names {
		if err := os.WriteFile(s.path("go."+n), nil, 0o600); err != nil {
			s.t.Fatal(err)
		}
	}
}

// noBad fails the test if a witness found itself somewhere it must not
// be.
func (s *sandbox) noBad() {
	s.t.Helper()
	if b, err := os.ReadFile(s.path("bad")); err == nil {
		s.t.Errorf("a witness ran where it must not:\n%s", b)
	}
}

// ranLines are the lines of DIR/ran, split.
func (s *sandbox) ranLines() [][]string {
	b, _ := os.ReadFile(s.path("ran"))
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, strings.Fields(l))
		}
	}
	return out
}

// M1: twelve jobs at --slots 3. Never more than 3 run, no two live ones
// share a slot, every slot is 0..2, every fence is new; status, list,
// metrics and history show the slots.
func TestSlotsWitness(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	var jobs []*exec.Cmd
	for i := range 12 {
		jobs = append(jobs, s.witness("pool", fmt.Sprintf("j%02d", i), 3, "s", "--slots", "3", "--wait", "5m"))
	}
	st := s.waitMany("pool", 3, 9)
	s.slotHolders(st, 3)
	for _, w := range st.Waiters {
		if w.Kind != "slot" || w.Slots != 3 {
			t.Errorf("status --json waiter %+v: want kind slot, slots 3", w)
		}
	}
	out, _, _ := s.output("list")
	if !regexp.MustCompile(`(?m)^pool +held +3 of 3 slots +\S+ +9 *$`).MatchString(out) {
		t.Errorf("list does not count 3 of 3 slots and 9 waiters:\n%s", out)
	}
	if n, ok := gauge(metricsOf(t, s.state), "fencerun_key_holders", "key", "pool"); !ok || n != 3 {
		t.Errorf("fencerun_key_holders{key=pool} = %v (present %v), want 3", n, ok)
	}

	s.openAll(jobs)
	hist, _, _ := s.output("history", "pool", "--json")
	var holdings []struct {
		Slot *int `json:"slot"`
	}
	json.Unmarshal([]byte(hist), &holdings)
	for _, h := range holdings {
		if h.Slot == nil || *h.Slot < 0 || *h.Slot > 2 {
			t.Errorf("history --json has a holding without a slot in 0..2:\n%s", hist)
			break
		}
	}
	if len(holdings) != 12 {
		t.Errorf("history --json has %d holdings, want 12", len(holdings))
	}
}

// slotHolders checks that st's holders are n slot holders of --slots n,
// in slots 0..n-1 in order, each with a pid, a fence and a witness that
// runs, and that holder is null.
func (s *sandbox) slotHolders(st keyStatus, n int) {
	s.t.Helper()
	var slots, want []int
	for i, h := range st.Holders {
		want = append(want, i)
		if h.Kind != "slot" || h.Slot == nil || h.Slots != n || h.PID == 0 || h.Fence == 0 {
			s.t.Errorf("status --json holder %+v: want kind slot, a slot, slots %d, pid and fence", h, n)
			continue
		}
		slots = append(slots, *h.Slot)
		if _, pid := s.running(h.Name); pid == 0 {
			s.t.Errorf("holder %s runs no witness", h.Name)
		}
	}
	if !slices.Equal(slots, want) || st.Holder != nil {
		s.t.Errorf("status --json: slots %v (want %v), holder %+v (want null)", slots, want, st.Holder)
	}
}

// openAll lets every witness go, and checks that each job exited 0,
// having run once, with a fence of its own, and no witness found itself
// where it must not be.
func (s *sandbox) openAll(jobs []*exec.Cmd) {
	s.t.Helper()
	os.WriteFile(s.path("go"), nil, 0o600)
	for i, j := range jobs {
		if code := exitOf(s.t, j); code != 0 {
			s.t.Errorf("job %d exited %d", i, code)
		}
	}
	s.noBad()
	ran, fences := s.ranLines(), map[string]bool{}
	for _, f := range ran {
		fences[f[3]] = true
	}
	if len(ran) != len(jobs) || len(fences) != len(jobs) {
		s.t.Errorf("%d jobs ran %d times with %d distinct fences:\n%v", len(jobs), len(ran), len(fences), ran)
	}
}

// startSlots starts n witnesses of key at --slots n, one after the other
// so that witness hI holds slot I, and returns their fencerun processes.
func (s *sandbox) startSlots(key string, n int) []*exec.Cmd {
	s.t.Helper()
	var hs []*exec.Cmd
	for i := range n {
		name := fmt.Sprintf("h%d", i)
		hs = append(hs, s.witness(key, name, n, "s", "--slots", strconv.Itoa(n)))
		if slot, _ := s.running(name); slot != strconv.Itoa(i) {
			s.t.Fatalf("%s holds slot %s, want %d (the lowest free)", name, slot, i)
		}
	}
	return hs
}

// M1, M3, S2: a holder whose fencerun is SIGKILLed frees its slot, and
// only its slot: the next waiter takes that slot (the lowest free) once
// the dead holder's command, left running, is stopped; the other
// holders run on.
func TestSlotsKilledHolderFreesItsSlot(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	hs := s.startSlots("pool", 3)
	w := s.witness("pool", "w", 3, "s", "--slots", "3")
	s.waitMany("pool", 3, 1)
	_, left := s.running("h1")

	if err := hs[1].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exitOf(t, hs[1])
	slot, _ := s.running("w")
	if slot != "1" {
		t.Errorf("the waiter took slot %s, want the dead holder's 1", slot)
	}
	if alive(left) {
		t.Errorf("the dead holder's command (pid %d) still runs beside its slot's next holder", left)
	}
	for _, name := range []string{"h0", "h2"} {
		if _, err := os.Stat(s.path("run." + name)); err != nil {
			t.Errorf("%s stopped when another slot's holder died", name)
		}
	}
	s.letGo("h0", "h2", "w")
	for name, c := range map[string]*exec.Cmd{"h0": hs[0], "h2": hs[2], "w": w} {
		if code := exitOf(t, c); code != 0 {
			t.Errorf("%s exited %d", name, code)
		}
	}
	s.noBad()
}

// M3: release --force --slot 1 revokes that holder alone (it exits 76,
// named with its slot); cancel --pid P --wait asks one alone (it exits
// 77); the others run on.
func TestSlotsReleaseAndCancelOne(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	hs := s.startSlots("pool", 3)
	out, stderr, code := s.output("release", "pool", "--force", "--slot", "1")
	want := regexp.MustCompile(`^released pool: revoked h1 \(pid ` + strconv.Itoa(hs[1].Process.Pid) + ` on .+\), fence [0-9]+, slot 1, held for [0-9]+s; its command is being stopped and it exits 76\n$`)
	if code != 0 || !want.MatchString(out) {
		t.Errorf("release --slot 1: exit %d\n%s%s", code, out, stderr)
	}
	if code := exitOf(t, hs[1]); code != 76 {
		t.Errorf("the revoked holder exited %d, want 76", code)
	}

	out, stderr, code = s.output("cancel", "pool", "--pid", strconv.Itoa(hs[2].Process.Pid), "--wait", "1m")
	if code != 0 || !strings.Contains(out, "h2 (pid "+strconv.Itoa(hs[2].Process.Pid)) || !strings.Contains(out, "slot 2") || !strings.Contains(out, "has let go") {
		t.Errorf("cancel --pid: exit %d\n%s%s", code, out, stderr)
	}
	if code := exitOf(t, hs[2]); code != 77 {
		t.Errorf("the cancelled holder exited %d, want 77", code)
	}
	out, _, _ = s.output("release", "pool", "--force", "--slot", "2")
	if !strings.Contains(out, "pool has no holder in slot 2: nothing to release") {
		t.Errorf("release of a free slot:\n%s", out)
	}

	st := s.status("pool")
	if len(st.Holders) != 1 || st.Holders[0].Name != "h0" {
		t.Errorf("after one release and one cancel, holders %+v, want h0 alone", st.Holders)
	}
	s.letGo("h0")
	if code := exitOf(t, hs[0]); code != 0 {
		t.Errorf("h0 exited %d", code)
	}
	s.noBad()
}

// M2: shared holders run together, an exclusive one alone, in arrival
// order: S1 S2 hold together; X waits; S3 and S4, behind the waiting X,
// wait too (no writer starvation); X runs alone once S1 and S2 let go;
// then S3 and S4 start together.
func TestSharedAndExclusiveInArrivalOrder(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s1 := s.witness("snap", "S1", 0, "s", "-s")
	s.running("S1")
	s2 := s.witness("snap", "S2", 0, "s", "--shared", "--wait", "5m")
	s.running("S2") // beside S1: both hold their flock -s
	x := s.witness("snap", "X", 0, "x", "-x", "--wait", "5m")
	s.waitQueue("snap", "X")
	s3 := s.witness("snap", "S3", 0, "s", "-s")
	s.waitQueue("snap", "X", "S3")
	s4 := s.witness("snap", "S4", 0, "s", "-s")
	st := s.waitMany("snap", 2, 3)
	for _, h := range st.Holders {
		if h.Kind != "shared" || h.Slot != nil {
			t.Errorf("status --json holder %+v: want kind shared, no slot", h)
		}
	}
	var kinds []string
	for _, w := range st.Waiters {
		kinds = append(kinds, w.Name+" "+w.Kind)
	}
	if !slices.Equal(kinds, []string{"X exclusive", "S3 shared", "S4 shared"}) || st.Holder != nil {
		t.Errorf("status --json: waiters %q, holder %+v", kinds, st.Holder)
	}
	if out, _, _ := s.output("list"); !regexp.MustCompile(`(?m)^snap +held +2 shared `).MatchString(out) {
		t.Errorf("list does not count 2 shared:\n%s", out)
	}

	s.letGo("S1", "S2")
	s.running("X")
	s.waitQueue("snap", "S3", "S4")
	s.letGo("X")
	s.running("S3")
	s.running("S4") // together: neither has been let go
	s.letGo("S3", "S4")
	for name, c := range map[string]*exec.Cmd{"S1": s1, "S2": s2, "X": x, "S3": s3, "S4": s4} {
		if code := exitOf(t, c); code != 0 {
			t.Errorf("%s exited %d", name, code)
		}
	}
	s.noBad()
	order, _ := os.ReadFile(s.path("order"))
	if o := strings.Fields(string(order)); len(o) != 5 || !slices.Equal(o[:3], []string{"S1", "S2", "X"}) {
		t.Errorf("run order %q, want S1 S2 X then S3 and S4", o)
	}
}

// M1, M2: a run whose kind differs from the key's holders' exits 125
// naming both, at once, also with --wait; --shared or --exclusive with
// --slots N is a usage error; FENCERUN_SLOT is 0 with --slots 1 and absent without.
func TestSlotsMismatchExits125(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	hs := s.startSlots("pool", 2)
	for _, c := range []struct {
		args  []string
		names []string
	}{
		{[]string{"--slots", "4", "-n"}, []string{"--slots 2", "--slots 4"}},
		{[]string{"--slots", "3", "--wait", "5m"}, []string{"--slots 2", "--slots 3"}},
		{[]string{"-s", "--wait", "5m"}, []string{"--slots 2", "shared"}},
		{[]string{"--wait", "5m"}, []string{"--slots 2", "exclusive"}},
		{[]string{"--shared", "--slots", "2"}, []string{"--shared", "--slots"}},
		{[]string{"--slots", "2", "-s", "-x"}, []string{"--shared", "--exclusive"}},
		{[]string{"--slots", "2", "-x", "-n"}, []string{"--exclusive", "--slots 2"}},
	} {
		_, stderr, code := s.output(append(append([]string{"run", "--key", "pool"}, c.args...), "--", "true")...)
		if code != 125 {
			t.Errorf("run %q beside --slots 2 holders: exit %d, want 125\n%s", c.args, code, stderr)
		}
		for _, n := range c.names {
			if !strings.Contains(stderr, n) {
				t.Errorf("run %q: the refusal does not name %s:\n%s", c.args, n, stderr)
			}
		}
	}
	s.letGo("h0", "h1")
	for _, h := range hs {
		if code := exitOf(t, h); code != 0 {
			t.Errorf("a holder exited %d", code)
		}
	}
	for args, want := range map[string]string{"--slots 1": "0", "-x": "unset", "-s": "unset"} {
		out, stderr, code := s.output(append(append([]string{"run", "--key", "other"}, strings.Fields(args)...), "--", "sh", "-c", `echo "${FENCERUN_SLOT-unset}"`)...)
		if code != 0 || strings.TrimSpace(out) != want {
			t.Errorf("run %s: FENCERUN_SLOT %q (exit %d), want %s\n%s", args, out, code, want, stderr)
		}
	}
}
