package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/store"
)

// hierarchy returns the writable cgroup v2 hierarchy the tests run in, or
// skips: CI and this project's machines have one (as root).
func hierarchy(t *testing.T) *Hierarchy {
	t.Helper()
	h, err := FindHierarchy()
	if err != nil {
		t.Skipf("no writable cgroup v2 hierarchy: %v", err)
	}
	return h
}

// FindHierarchy's seam: a mountinfo naming no, a read-only or a missing
// cgroup2 mount gives the reason `--cgroup require` exits 125 with.
func TestFindHierarchyNone(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, mountinfo, want string }{
		{"none", "22 1 0:21 / /proc rw,nosuid - proc proc rw\n", "no cgroup2 hierarchy is mounted"},
		{"read-only", "41 31 0:38 / " + dir + " ro,relatime - cgroup2 cgroup2 rw\n", "mounted read-only"},
		{"missing", "41 31 0:38 / " + dir + "/gone rw,relatime - cgroup2 cgroup2 rw\n", "is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, tc.name)
			if err := os.WriteFile(f, []byte(tc.mountinfo), 0o600); err != nil {
				t.Fatal(err)
			}
			if h, err := findHierarchy(f); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FindHierarchy() = %v, %v; want an error saying %q", h, err, tc.want)
			}
		})
	}
}

// S2 with a cgroup: the command runs in its cgroup from its first
// instruction; a descendant that left the group and ignores TERM is killed
// at the end of the grace by cgroup.kill; the cgroup is removed after.
func TestCgroupContainsTheTree(t *testing.T) {
	h := hierarchy(t)
	e := newEnv(t)
	path := h.NewPath()
	p, err := start(Config{Argv: []string{"sh", "-c",
		`cat /proc/self/cgroup > $INBOX.cg; setsid sh -c 'trap "" TERM; echo $$ > $INBOX; while :; do sleep 1; done' & sleep 1000`},
		Env: e.env, Grace: 100 * time.Millisecond, Cgroup: path})
	if err != nil {
		t.Fatal(err)
	}
	stubborn := e.inbox.nextPid(t)
	b, _ := os.ReadFile(e.inbox.path + ".cg")
	if want := "0::/" + strings.TrimPrefix(path, h.mount+"/"); !strings.Contains(string(b), want+"\n") {
		t.Errorf("the command's cgroup: %q, want %q", b, want)
	}
	if got := p.Cgroup(); got != path {
		t.Errorf("Cgroup() = %q, want %q", got, path)
	}
	if !p.Owns(stubborn.pid) || p.Owns(os.Getpid()) {
		t.Errorf("Owns: the setsid descendant %v, this process %v", p.Owns(stubborn.pid), p.Owns(os.Getpid()))
	}
	p.Stop(100 * time.Millisecond)
	if st := wait(t, p); st.Signal != syscall.SIGTERM {
		t.Errorf("status %+v, want death by SIGTERM", st)
	}
	requireGone(t, stubborn, false)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the command's cgroup is still there: %v", err)
	}
}

// The grace runs on the injected clock (CLOCK_BOOTTIME in production): a
// TERM-ignoring command is killed when the clock passes the grace, with or
// without a cgroup, not when poll(2)'s own clock does.
func TestGraceOnInjectedClock(t *testing.T) {
	for _, contained := range []bool{false, true} {
		t.Run(map[bool]string{false: "fallback", true: "cgroup"}[contained], func(t *testing.T) {
			e := newEnv(t)
			cfg := Config{Argv: []string{"sh", "-c", `trap '' TERM; echo $$ > $INBOX; while :; do sleep 1; done`}, Env: e.env, Marker: e.marker}
			if contained {
				cfg.Cgroup = hierarchy(t).NewPath()
			}
			clock := boottime.NewFake(time.Hour)
			cfg.Clock = clock
			p, err := start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			sh := e.inbox.nextPid(t)
			p.Stop(time.Hour)
			clock.WaitArmed(2 * time.Hour) // the sweep waits for the grace's end
			if !alive(sh) {
				t.Fatal("the command died before its grace ended on the clock")
			}
			clock.Advance(time.Hour)
			if st := wait(t, p); st.Signal != syscall.SIGKILL {
				t.Errorf("status %+v, want death by SIGKILL", st)
			}
		})
	}
}

// S2 after a SIGKILLed wrapper, with a cgroup: a process of the dead
// command's group that had moved itself out of the cgroup is still
// stopped, by the recorded group, as without a cgroup; before, only the
// cgroup was stopped and it ran on beside the next holder's command.
func TestLeftoverOutsideItsCgroupIsStopped(t *testing.T) {
	h := hierarchy(t)
	e := newEnv(t)
	mk := func() string {
		path := h.NewPath()
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
			for i := 0; i < 100; i++ {
				if err := os.Remove(path); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		return path
	}
	dead, elsewhere := mk(), mk() // the dead holder's command's cgroup, and where the escapee went
	d, err := os.Open(dead)
	if err != nil {
		t.Fatal(err)
	}
	leader := exec.Command("sh", "-c", `sh -c 'echo $$ > `+elsewhere+`/cgroup.procs && echo $$ > $INBOX && exec sleep 1000' & exec sleep 1000`)
	leader.Env = e.env
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: int(d.Fd())}
	err = leader.Start()
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Process.Kill(); leader.Wait() })
	escapee := e.inbox.nextPid(t)
	lq, err := readProc(leader.Process.Pid)
	if err != nil || escapee.pgid != lq.pid {
		t.Fatalf("the escapee %d is in group %d, not the leader's %d (%v): the scenario did not happen", escapee.pid, escapee.pgid, lq.pid, err)
	}
	if err := bindCgroup(dead, e.marker); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	l := store.Leftover{HolderPID: 1 << 22, Host: host, Cgroup: dead, Marker: e.marker, Group: store.ProcessID{ID: lq.pid, Start: lq.start}}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if _, err := stopLeftovers(ctx, l, StopConfig{Grace: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	requireGone(t, escapee, false)
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead holder's cgroup is still there: %v", err)
	}
}

// Issue 26, point 7: a command that made a threaded cgroup below its own
// and moved a thread there (reading that cgroup's cgroup.procs fails with
// EOPNOTSUPP) wedged the key after its wrapper's SIGKILL: every later run
// exited 125. Its processes are read from the domain above, which lists
// them, and the leftover is stopped.
func TestThreadedCgroupBelowTheCommandsIsStopped(t *testing.T) {
	h := hierarchy(t)
	e := newEnv(t)
	path := h.NewPath()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
		for i := 0; i < 100; i++ {
			os.Remove(filepath.Join(path, "t"))
			if err := os.Remove(path); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err := bindCgroup(path, e.marker); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `mkdir "$0/t" && echo threaded > "$0/t/cgroup.type" && echo $$ > "$0/t/cgroup.threads" && echo $$ > $INBOX && exec sleep 1000`, path)
	cmd.Env = e.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: int(d.Fd())}
	err = cmd.Start()
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	q := e.inbox.nextPid(t)
	host, _ := os.Hostname()
	l := store.Leftover{HolderPID: 1 << 22, Host: host, Cgroup: path, Marker: e.marker}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if n, err := countLeftovers(l); err != nil || n != 1 {
		t.Errorf("countLeftovers: %d, %v; want 1", n, err)
	}
	if n, err := stopLeftovers(ctx, l, StopConfig{Grace: 100 * time.Millisecond}); err != nil || n != 1 {
		t.Fatalf("stopLeftovers: %d, %v; want 1, nil", n, err)
	}
	requireGone(t, q, false)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the dead holder's cgroup is still there: %v", err)
	}
}

// S9: a record may name only the cgroup its own run made. A shared
// store's member, or a private store's legacy or hand-made record, that
// writes another run's cgroup path into a record, say a root job of
// root's private store, with a marker of its own, gets nothing of it
// stopped; the run's own marker reaches it. Before (issue 26, point 9), a
// private store's record had its cgroup killed verbatim.
func TestRecordNamesOnlyItsOwnRunsCgroup(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared", false: "private"}[shared], func(t *testing.T) {
			testRecordNamesOnlyItsOwnRunsCgroup(t, shared)
		})
	}
}

func testRecordNamesOnlyItsOwnRunsCgroup(t *testing.T, shared bool) {
	h := hierarchy(t)
	e := newEnv(t)
	path := h.NewPath()
	p, err := start(Config{Argv: []string{"sh", "-c", `echo $$ > $INBOX; exec sleep 1000`},
		Env: e.env, Marker: e.marker, Grace: 100 * time.Millisecond, Cgroup: path})
	if err != nil {
		t.Fatal(err)
	}
	victim := e.inbox.nextPid(t)
	t.Cleanup(func() { p.Stop(0); wait(t, p) })
	host, _ := os.Hostname()
	other := "FENCERUN_TICK=/elsewhere/ticks/t-" + strings.Repeat("ab", 16)
	if !validMarker(other) {
		t.Fatalf("%q is not in the tick channel's form: the scenario did not happen", other)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	forged := store.Leftover{HolderPID: 1 << 22, Host: host, Cgroup: path, Marker: other, Shared: shared}
	if n, err := stopLeftovers(ctx, forged, StopConfig{Grace: 100 * time.Millisecond}); err != nil || n != 0 {
		t.Errorf("a forged record: found %d, %v; want 0, nil", n, err)
	}
	if cur, err := readProc(victim.pid); err != nil || cur.start != victim.start || cur.dead() {
		t.Fatalf("a record naming another run's cgroup stopped pid %d", victim.pid)
	}
	own := store.Leftover{HolderPID: 1 << 22, Host: host, Cgroup: path, Marker: e.marker, Shared: shared}
	if n, err := stopLeftovers(ctx, own, StopConfig{Grace: 100 * time.Millisecond}); err != nil || n == 0 {
		t.Errorf("the run's own record: found %d, %v; want its process stopped", n, err)
	}
	wait(t, p)
	requireGone(t, victim, false)
}

// Prepare makes no cgroup: the cgroup is made by Start, once the lease is
// held, bound to the run's marker, and the command runs in it with the
// environment Start is given; a second Start starts nothing.
func TestPreparedCgroup(t *testing.T) {
	h := hierarchy(t)
	e := newEnv(t)
	cfg := Config{Argv: []string{"sh", "-c", `cat /proc/self/cgroup > $INBOX.cg; echo "$LATE" > $INBOX.env; echo $$ > $INBOX; sleep 0.2`},
		Env: e.env, Marker: e.marker, Cgroup: h.NewPath()}

	pr := Prepare(cfg)
	if _, err := os.Stat(cfg.Cgroup); !os.IsNotExist(err) {
		t.Fatalf("Prepare made the cgroup %s before the start: %v", cfg.Cgroup, err)
	}
	p, err := pr.Start(append(e.env, "LATE=given at the start"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.inbox.nextPid(t)
	if !boundTo(cfg.Cgroup, e.marker) {
		t.Errorf("the command's cgroup %s is missing or not bound to the run's marker", cfg.Cgroup)
	}
	if st := wait(t, p); st.Code != 0 {
		t.Errorf("status %+v, want exit 0", st)
	}
	b, _ := os.ReadFile(e.inbox.path + ".cg")
	if want := "0::/" + strings.TrimPrefix(cfg.Cgroup, h.mount+"/"); !strings.Contains(string(b), want+"\n") {
		t.Errorf("the command's cgroup: %q, want %q", b, want)
	}
	if b, _ := os.ReadFile(e.inbox.path + ".env"); string(b) != "given at the start\n" {
		t.Errorf("the command's environment had LATE=%q, want Start's", b)
	}
	if _, err := os.Stat(cfg.Cgroup); !os.IsNotExist(err) {
		t.Errorf("the command's cgroup is still there after Wait: %v", err)
	}
	if p, err := pr.Start(e.env, nil); err == nil || p != nil {
		t.Errorf("a second Start = %v, %v; want an error", p, err)
	}
}

// A cgroup that cannot be made (its parent gone) fails the Start, and
// nothing is made or run.
func TestPreparedCgroupThatCannotBeMade(t *testing.T) {
	h := hierarchy(t)
	e := newEnv(t)
	path := filepath.Join(h.NewPath(), "fencerun-nested") // the parent does not exist
	ran := filepath.Join(t.TempDir(), "ran")
	pr := Prepare(Config{Argv: []string{"touch", ran}, Env: e.env, Marker: e.marker, Cgroup: path})
	p, err := pr.Start(e.env, nil)
	if err == nil || p != nil || !strings.Contains(err.Error(), "creating cgroup") {
		t.Fatalf("Start = %v, %v; want the cgroup's creation error", p, err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran")
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("a cgroup was made: %v", err)
	}
}

// A dead holder's cgroup that its command left empty is something left to
// stop (Remain), and stopping removes it, but only where it is bound to
// the record's run: an unbound cgroup, or one bound to another run, is
// neither counted nor removed (it may be a live run's, made a moment
// before its command starts).
func TestRemainCountsOnlyTheRecordsEmptyCgroup(t *testing.T) {
	h := hierarchy(t)
	e, other := newEnv(t), newEnv(t)
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name, bind string
		remains    bool
	}{{"bound", e.marker, true}, {"unbound", "", false}, {"another run's", other.marker, false}} {
		t.Run(tc.name, func(t *testing.T) {
			path := h.NewPath()
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(path) })
			if tc.bind != "" {
				if err := bindCgroup(path, tc.bind); err != nil {
					t.Fatal(err)
				}
			}
			l := []store.Leftover{{HolderPID: 1 << 22, Host: host, Cgroup: path, Marker: e.marker}}
			if left, err := Remain(l); err != nil || left != tc.remains {
				t.Errorf("Remain: %v, %v; want %v", left, err, tc.remains)
			}
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			if _, _, err := StopTrees(ctx, l, StopConfig{Grace: 100 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); os.IsNotExist(err) != tc.remains {
				t.Errorf("the cgroup after the stop: %v; want it removed only when bound to the record's run", err)
			}
			if left, _ := Remain(l); left {
				t.Error("Remain after the stop: true, want false")
			}
		})
	}
}

// Two holders may stop one dead holder's tree at once (a holder beside
// the one that took the dead one's slot: store/filestore, stopping). The
// one that finds it gone first removes its cgroup; the other, which had
// opened the cgroup before, must take that for "gone", not fail: it used
// to fail opening cgroup.events, and its run exited 125 (the chaos test).
func TestLeftoverCgroupRemovedByAnotherStopper(t *testing.T) {
	h := hierarchy(t)
	e := newEnv(t)
	path := h.NewPath()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	if err := bindCgroup(path, e.marker); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	l := store.Leftover{HolderPID: 1 << 22, Host: host, Cgroup: path, Marker: e.marker}
	tree, err := findLeftovers(l, hclog.NewNullLogger(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer tree.close()
	if tree.cg == nil {
		t.Fatal("the dead holder's cgroup was not opened: the scenario did not happen")
	}
	if err := os.Remove(path); err != nil { // the other stopper's removal
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := tree.stop(ctx, StopConfig{Grace: time.Second}.withDefaults()); err != nil {
		t.Errorf("stopping a tree whose cgroup another stopper removed: %v", err)
	}
}
