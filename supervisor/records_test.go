package supervisor

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// S9 (issue 26, point 9): a private store's record that names an unrelated
// process group, or a session its holder did not lead, gets nothing of it
// stopped: a group or session is the tree's only where a live process of
// it carries the record's marker. Before, the named group was killed.
func TestRecordNamesOnlyItsOwnGroup(t *testing.T) {
	e := newEnv(t)
	victim := exec.Command("sleep", "1000")
	victim.Env = os.Environ() // without the marker
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	q, err := readProc(victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	id := store.ProcessID{ID: q.pid, Start: q.start}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	for _, l := range []store.Leftover{
		{HolderPID: 1 << 22, Host: host, Marker: e.marker, Group: id},
		{HolderPID: 1 << 22, Host: host, Marker: e.marker, Session: id},
		{HolderPID: q.pid, Host: host, Marker: e.marker, Session: id},
	} {
		if n, err := stopLeftovers(ctx, l, StopConfig{Grace: 100 * time.Millisecond}); err != nil || n != 0 {
			t.Errorf("%+v: found %d, %v; want 0, nil", l, n, err)
		}
		if !alive(q) {
			t.Fatalf("a record naming an unrelated group or session (%+v) stopped pid %d", l, q.pid)
		}
	}
}

// S2: the recorded group of a dead holder's command whose members cleared
// their environment is stopped whole once one of its members carries the
// marker; a session its holder led, likewise.
func TestRecordedGroupProvenByItsMarker(t *testing.T) {
	e := newEnv(t)
	cmd := exec.Command("sh", "-c", `env -i sleep 1000 & echo $! > $INBOX; exec sleep 1000`)
	cmd.Env = e.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	cleared := e.inbox.nextPid(t)
	leader, err := readProc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	l := store.Leftover{HolderPID: 1 << 22, Host: host, Marker: e.marker, Group: store.ProcessID{ID: leader.pid, Start: leader.start}}
	if n, err := stopLeftovers(ctx, l, StopConfig{Grace: 100 * time.Millisecond}); err != nil || n != 2 {
		t.Errorf("found %d, %v; want 2, nil", n, err)
	}
	cmd.Wait()
	requireGone(t, cleared, false)
}
