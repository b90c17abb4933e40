package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// A waiter lives through its cluster's leader elections: each round here
// takes the leader of a 3-member cluster away (SIGKILL and restart, or
// SIGSTOP and SIGCONT) until the others elect a new one, several times,
// so that the waiter's keep-alives (every TTL/3 = 2 s) and the reads they
// trigger meet elections. Quorum stays, and an election (about a second:
// election timeout 1 s) is well inside the waiter's term, so giving up
// (125) would be wrong: the waiter must still be queued after every
// round, and take the key once the holder (a lock of the test's) lets go. Before, a take that
// met an election failed the wait at once ("leader changed", or no
// answer within --dial-timeout).
func TestEtcdWaiterLivesThroughLeaderElections(t *testing.T) {
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			waiterThroughElections(t, how)
		})
	}
}

func waiterThroughElections(t *testing.T, how string) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	eps, cl := c.Endpoints(), c.Client()
	dir := t.TempDir()
	// The holder is a lock of the test's own, with no keep-alive to lose
	// through the elections, so the waiter is all that is tested.
	letGo := holdAsTestLock(t, cl, "le")
	// The waiter's TTL leaves room for an election and the client's
	// failover inside a term (as the holder's in
	// TestEtcdClusterLosesLeaderThenQuorum).
	w := onEtcd(t, eps, "run", "--key", "le", "--ttl", "6", "--name", "waiter", "--", "sh", "-c", holderScript, "sh", dir, "w")
	wlog := startLogged(t, w, dir, "waiter")
	waitContenders(t, cl, "le", 2)
	exited := make(chan error, 1)
	go func() { exited <- w.Wait() }()

	for round := range 4 {
		lead := leader(t, c, cl, nil)
		m := c.Members[lead]
		if how == "killed" {
			m.Kill()
		} else {
			m.Pause()
		}
		leader(t, c, cl, map[int]bool{lead: true}) // a new one is elected
		if how == "killed" {
			m.Restart(t)
			c.WaitReady(m)
		} else {
			m.Resume()
		}
		leader(t, c, cl, nil) // all three agree on one again
		select {
		case err := <-exited:
			b, _ := os.ReadFile(wlog)
			t.Fatalf("round %d: the waiter gave up (%v) through a leader election that kept quorum:\n%s", round, err, b)
		default:
		}
	}
	letGo()
	waitFile(t, filepath.Join(dir, "w.started"))
	if err := os.WriteFile(filepath.Join(dir, "w.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := testsupport.ExitCode(t, <-exited); code != 0 {
		b, _ := os.ReadFile(wlog)
		t.Errorf("waiter exited %d after the holder let go\n%s", code, b)
	}
}

// A waiter whose cluster lost its quorum while its lease may still live
// waits on for it, but no longer than its --wait: at -w it gives up as
// any wait that ran out does (75, naming -w), not with the cluster's
// error (125), which is for a wait that outlived its lease's term.
func TestEtcdWaiterWithoutQuorumEndsAtItsWait(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	eps, cl := c.Endpoints(), c.Client()
	holdAsTestLock(t, cl, "wq")
	// The term (TTL 10 s from a keep-alive at most 3.3 s old when the
	// quorum goes) outlasts the wait, which ends 6 s after the waiter
	// queued; its first keep-alive without quorum fails well before.
	w := onEtcd(t, eps, "run", "--key", "wq", "--ttl", "10", "-w", "6s", "--dial-timeout", "1s", "--", "true")
	wlog := startLogged(t, w, t.TempDir(), "waiter")
	waitContenders(t, cl, "wq", 2)
	c.Members[0].Kill()
	c.Members[1].Kill()
	code := exitOf(t, w)
	b, _ := os.ReadFile(wlog)
	if code != 75 || !strings.Contains(string(b), "gave up waiting after 6s") {
		t.Errorf("the waiter exited %d, want 75 giving up at its -w:\n%s", code, b)
	}
}
