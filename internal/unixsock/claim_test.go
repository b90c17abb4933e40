package unixsock

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

func claimName(t *testing.T) string {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	return "fencerun-test/claim/" + hex.EncodeToString(b[:])
}

// A claim released while this process forks is free again at once: a
// child between fork and exec holds a copy of the listener for a moment
// (its descriptor is close-on-exec), and TakeClaim must not take that copy
// for a holder. Before, back-to-back Release and TakeClaim in one process
// found the name held by "uid 0" (ourselves) a third of the time while a
// goroutine ran commands; a resident or key holder released and acquired
// again in-process was refused as "a holder whose lock file was moved".
func TestAReleasedClaimIsFreeWhileThisProcessForks(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	var forks atomic.Int64
	go func() {
		defer close(done)
		// Forks one at a time, each waited for; bounded by count too.
		for range 5000 {
			select {
			case <-stop:
				return
			default:
			}
			exec.Command("/bin/true").Run()
			forks.Add(1)
		}
	}()
	defer func() { close(stop); <-done }()
	name := claimName(t)
	// Until the other goroutine forked a few hundred times, while tries
	// overlap its forks.
	for i := 0; forks.Load() < 300; i++ {
		select {
		case <-done:
			t.Fatal("the forks ended first")
		default:
		}
		c, uid, err := TakeClaim(name)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			t.Fatalf("try %d: the claim released just before is held (uid %d)", i, uid)
		}
		c.Release()
	}
}

// A claim this process does hold is held, also for itself.
func TestAHeldClaimIsHeldForItsOwnProcessToo(t *testing.T) {
	name := claimName(t)
	c, _, err := TakeClaim(name)
	if err != nil || c == nil {
		t.Fatalf("TakeClaim = %v, %v", c, err)
	}
	defer c.Release()
	again, uid, err := TakeClaim(name)
	if err != nil || again != nil || uid != os.Geteuid() {
		t.Fatalf("TakeClaim of a held claim = %v, uid %d, %v; want nil and uid %d", again, uid, err, os.Geteuid())
	}
}

// Nobody accepts on a claim, so every connection made to it stays queued:
// anyone (an abstract name has no permissions), or a newcomer trying again
// every 100 ms for seven minutes, fills its backlog, after which connect
// fails (EAGAIN). The holder must still be told (S1, S9): before, it was
// "uid -1", ignored as a stranger's, and a newcomer whose holder's lock
// file was moved started beside the live holder.
func TestAClaimWithAFullBacklogIsStillTold(t *testing.T) {
	name := claimName(t)
	c, _, err := TakeClaim(name)
	if err != nil || c == nil {
		t.Fatalf("TakeClaim = %v, %v", c, err)
	}
	defer c.Release()
	full := false
	for range 70000 {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + name})
		unix.Close(fd) // the queued connection stays
		if err == unix.EAGAIN {
			full = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("the backlog never filled")
	}
	// A copy of our own claim, held: as another process's would be.
	c2, uid, err := TakeClaim(name)
	if err != nil || c2 != nil || uid != os.Geteuid() {
		t.Fatalf("TakeClaim with a full backlog = %v, uid %d, %v; want held by uid %d", c2, uid, err, os.Geteuid())
	}
}

// A copy of this process's released listener that a child keeps for a
// while is waited out, not taken for a holder: a child between fork and
// exec keeps one until its exec, which on a loaded machine can be well
// over 100 ms away (TestFencesStrictlyIncrease in resident was refused as
// "a holder whose lock file was moved" so, once at load 9). The child
// here keeps it, passed on, for 300 ms; TakeClaim waited 100 ms.
func TestAReleasedClaimIsFreeOnceAChildsCopyIsGone(t *testing.T) {
	name := claimName(t)
	c, _, err := TakeClaim(name)
	if err != nil || c == nil {
		t.Fatalf("TakeClaim = %v, %v", c, err)
	}
	f, err := c.ln.File()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "0.3")
	child.ExtraFiles = []*os.File{f}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	f.Close()
	c.Release()
	again, uid, err := TakeClaim(name)
	if err != nil || again == nil {
		t.Fatalf("TakeClaim after the release, while a child kept a copy: %v, uid %d, %v; want the claim", again, uid, err)
	}
	again.Release()
}
