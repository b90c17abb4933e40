package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// liveInGroup stops process group pgid as a whole, so that nothing of it
// can fork away, and counts its live processes.
func liveInGroup(t *testing.T, pgid int) int {
	t.Helper()
	if err := unix.Kill(-pgid, syscall.SIGSTOP); err == unix.ESRCH {
		return 0
	}
	procs, err := readProcs()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range procs {
		if q.pgid == pgid && !q.dead() {
			n++
		}
	}
	return n
}

// S2 after a wrapper's SIGKILL, without a cgroup (issue 26, point 4): a
// process of the dead holder's group that forks and exits in a loop,
// ignoring SIGTERM, is gone from every reading of /proc. The recorded
// group is stopped as a whole, and the tree is gone only once the group
// holds no live process. Before, two empty readings declared it gone and
// it ran on beside the next holder.
func TestForkHopperOfADeadHolderIsStopped(t *testing.T) {
	bin := buildC(t, "hopper")
	e := newEnv(t)
	ready := filepath.Join(t.TempDir(), "ready")
	reaper := exec.Command(bin, ready, e.marker)
	reaper.Env = os.Environ()
	reaper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := reaper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reaper.Process.Kill(); reaper.Wait() })
	pgid := readyPid(t, ready)
	t.Cleanup(func() { unix.Kill(-pgid, syscall.SIGKILL) })
	first, err := readProc(pgid)
	if err != nil || first.pgid != pgid {
		t.Fatalf("the hopper's first process %d: %+v, %v: the scenario did not happen", pgid, first, err)
	}
	if err := unix.Kill(pgid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	l := store.Leftover{HolderPID: 1 << 22, Host: host, Marker: e.marker, Group: store.ProcessID{ID: pgid, Start: first.start}}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if _, err := stopLeftovers(ctx, l, StopConfig{Grace: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if n := liveInGroup(t, pgid); n != 0 {
		t.Errorf("stopLeftovers returned with %d live processes of the hopper's group %d", n, pgid)
	}
}
