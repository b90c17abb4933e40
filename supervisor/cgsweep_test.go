package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// sweepDir makes a cgroup of the test's own below the hierarchy's
// directory, to sweep: other runs' cgroups are never the test's input.
func sweepDir(t *testing.T) string {
	t.Helper()
	h := hierarchy(t)
	var b [8]byte
	rand.Read(b[:])
	dir := filepath.Join(h.dir, "cgclean-sweep-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		c := &cgroup{path: dir, fd: -1}
		waitEmpty(t, dir)
		if err := c.remove(); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// waitEmpty waits for the cgroup at dir (and those below it) to hold no
// live process.
func waitEmpty(t *testing.T, dir string) {
	t.Helper()
	for range 1000 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || strings.Contains(string(b), "populated 0") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("cgroup %s is still populated", dir)
}

// deadPID is the pid of a process that ran and was reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// liveProcess starts sleep, killed and reaped when the test ends.
func liveProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "1000")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

func cgroupName(pid int) string {
	var b [8]byte
	rand.Read(b[:])
	return cgroupPrefix + strconv.Itoa(pid) + "-" + hex.EncodeToString(b[:])
}

// SweepCgroups removes the empty cgroups of fencerun runs whose maker is
// gone (a waiter SIGKILLed in its queue leaves one) or was a process whose
// pid a later one reused, and nothing else: not one that is populated or
// has cgroups below it, not a live maker's, not one whose lock a live run
// holds (its prepared cgroup), not one not named as fencerun names them.
func TestSweepCgroups(t *testing.T) {
	dir := sweepDir(t)
	mk := func(name string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := deadPID(t)
	gone := mk(cgroupName(dead))

	reusedBy := liveProcess(t)
	reused := mk(cgroupName(reusedBy.Process.Pid))
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(reused, old, old); err != nil {
		t.Fatal(err)
	}

	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { zombie.Wait() })
	zpid := zombie.Process.Pid
	for { // a zombie until the test reaps it
		q, err := readProc(zpid)
		if err != nil {
			t.Fatal(err)
		}
		if q.dead() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ofZombie := mk(cgroupName(zpid))

	maker := liveProcess(t)
	live := mk(cgroupName(maker.Process.Pid))

	populated := mk(cgroupName(dead))
	d, err := os.Open(populated)
	if err != nil {
		t.Fatal(err)
	}
	inside := exec.Command("sleep", "1000")
	inside.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	err = inside.Start()
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inside.Process.Kill(); inside.Wait() })

	parent := mk(cgroupName(dead))
	if err := os.Mkdir(filepath.Join(parent, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}

	prepared := Prepare(Config{Argv: []string{"true"}, Cgroup: filepath.Join(dir, cgroupName(dead))})
	if prepared.err != nil {
		t.Fatal(prepared.err)
	}
	t.Cleanup(prepared.Discard)

	badForm := mk(cgroupPrefix + strconv.Itoa(dead) + "-notsixteenhex")
	notOurs := mk("other-" + strconv.Itoa(dead) + "-0123456789abcdef")

	removed, err := SweepCgroups(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{gone, reused, ofZombie}
	slices.Sort(want)
	slices.Sort(removed)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, p := range want {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: still there (%v)", p, err)
		}
	}
	for what, p := range map[string]string{
		"a live maker's": live, "a populated": populated, "one with a cgroup below": parent,
		"a live run's prepared": prepared.cfg.Cgroup, "a misnamed": badForm, "another's": notOurs,
	} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s cgroup was removed: %v", what, err)
		}
	}
	if err := inside.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process in the populated cgroup: %v", err)
	}
}

// A prepared run's Start sweeps its cgroup's directory once its command
// runs: the cgroup a waiter SIGKILLed in its queue left goes.
func TestStartSweepsDeadCgroups(t *testing.T) {
	dir := sweepDir(t)
	left := filepath.Join(dir, cgroupName(deadPID(t)))
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	p, err := Start(Config{Argv: []string{"true"}, Env: e.env, Cgroup: filepath.Join(dir, cgroupName(os.Getpid()))})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	for range 1000 { // the sweep runs beside the command: wait for it
		if _, err := os.Stat(left); os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("the dead run's cgroup is still there after a run in its directory")
}

// A dead holder's record may name a cgroup that is gone (swept once
// empty): stopping its leftovers finds nothing there, and succeeds.
func TestStopLeftoversOfAGoneCgroup(t *testing.T) {
	dir := sweepDir(t)
	host, _ := os.Hostname()
	l := store.Leftover{HolderPID: deadPID(t), Host: host, Cgroup: filepath.Join(dir, cgroupName(deadPID(t)))}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	n, err := StopLeftovers(ctx, l, StopConfig{Grace: 100 * time.Millisecond})
	if err != nil || n != 0 {
		t.Errorf("StopLeftovers of a gone cgroup: %d processes, %v; want 0, nil", n, err)
	}
	if n, err := CountLeftovers(l); err != nil || n != 0 {
		t.Errorf("CountLeftovers of a gone cgroup: %d, %v; want 0, nil", n, err)
	}
}

// A run whose pid means nothing to a sweeper (one reading another pid
// namespace's /proc, where no process has it) can have its cgroup swept
// between the mkdir and the lock. It makes it again and locks that one,
// instead of failing with a false "no cgroup.kill" (found by review7:
// a host prune beside a run under unshare -p).
func TestACgroupSweptBeforeItsLockIsMadeAgain(t *testing.T) {
	dir := sweepDir(t)
	path := filepath.Join(dir, cgroupName(deadPID(t)))
	var swept []string
	cgroupMade = func(p string) {
		if swept == nil {
			swept, _ = SweepCgroups(dir)
		}
	}
	t.Cleanup(func() { cgroupMade = nil })
	c, err := createCgroup(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.remove() })
	if !slices.Equal(swept, []string{path}) {
		t.Fatalf("the sweep in the window removed %v, want %s", swept, path)
	}
	var fst, st syscall.Stat_t
	if err := syscall.Fstat(c.fd, &fst); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("the cgroup is not at its path after createCgroup: %v", err)
	}
	if fst.Ino != st.Ino {
		t.Fatal("createCgroup's descriptor is not the cgroup at its path")
	}
	if got, _ := SweepCgroups(dir); len(got) != 0 {
		t.Fatalf("a sweep after the lock removed %v", got)
	}
}
