package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// A waiter whose cluster loses quorum (two of three members paused) takes
// again only while its lease may live: past its last keep-alive's term it
// gives up with 125 (E6), never having started its command (the key is
// held throughout by a lock of the test's), and once quorum is back its
// contender key goes with its lease. The attack on the waiter's retries
// through elections: they must neither take the held key nor keep the
// waiter queued past its term.
func TestEtcdWaiterLosesQuorum(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	eps, cl := c.Endpoints(), c.Client()
	dir := t.TempDir()
	holdAsTestLock(t, cl, "lq")
	w := onEtcd(t, eps, "run", "--key", "lq", "--ttl", "3", "--name", "waiter", "--", "sh", "-c", holderScript, "sh", dir, "w")
	wlog := startLogged(t, w, dir, "waiter")
	waitContenders(t, cl, "lq", 2)
	exited := make(chan error, 1)
	go func() { exited <- w.Wait() }()

	// An election first, which the waiter lives through (as in
	// TestEtcdWaiterLivesThroughLeaderElections), then quorum lost.
	lead := leader(t, c, cl, nil)
	c.Members[lead].Pause()
	leader(t, c, cl, map[int]bool{lead: true})
	c.Members[lead].Resume()
	leader(t, c, cl, nil)
	select {
	case err := <-exited:
		b, _ := os.ReadFile(wlog)
		t.Fatalf("the waiter gave up (%v) through an election that kept quorum:\n%s", err, b)
	default:
	}
	paused := []int{0, 1}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, i := range paused {
				c.Members[i].Resume()
			}
		}
	}
	t.Cleanup(resume)
	for _, i := range paused {
		c.Members[i].Pause()
	}
	lost := time.Now()
	// Bounded by the waiter's term (3 s from its last keep-alive), then
	// takes for --dial-timeout (2 s) more, and one take's timeout: about
	// 10 s here; a minute is for the load only, and a waiter still queued
	// then keeps its place past its term.
	select {
	case err := <-exited:
		code := testsupport.ExitCode(t, err)
		t.Logf("the waiter gave up %v after quorum was lost: exit %d", time.Since(lost), code)
		if code != 125 {
			b, _ := os.ReadFile(wlog)
			t.Errorf("waiter: exit %d after its cluster lost quorum, want 125\n%s", code, b)
		}
	case <-time.After(time.Minute):
		b, _ := os.ReadFile(wlog)
		t.Fatalf("the waiter is still waiting a minute after its cluster lost quorum (TTL 3 s):\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "w.started")); err == nil {
		t.Errorf("the waiter started its command while the key was held by another lock")
	}
	resume()
	leader(t, c, cl, nil)
	// Its lease, kept no more, expires (a new leader gives leases a fresh
	// term first): the test's lock is then the only contender.
	waitContenders(t, cl, "lq", 1)
}
