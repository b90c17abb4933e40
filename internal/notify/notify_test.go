package notify

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/testsupport"
)

// A send reaches the one listener it names, and sends coalesce; a name
// that is not a listener's is never sent to; Close removes the socket.
func TestSendReachesItsListenerOnly(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	a, err := Listen(fd, dir, "x.", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Listen(fd, dir, "x.", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := make(chan struct{}, 1), make(chan struct{}, 1)
	a.Notify(ca, func(err error) { t.Error(err) })
	b.Notify(cb, func(err error) { t.Error(err) })
	for range 3 {
		if err := Send(fd, dir, "x.", a.Name()); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.WaitFor(t, "a's datagram", func() bool { return len(ca) == 1 })
	if len(cb) != 0 {
		t.Error("b heard a send to a")
	}
	if !IsName(a.Name(), "x.") || IsName(a.Name(), "y.") || IsName("x.n-../../etc/passwd0000000000000000000", "x.") {
		t.Errorf("IsName does not tell names apart (%s)", a.Name())
	}
	if err := Send(fd, dir, "x.", "x.n-zz"); err == nil {
		t.Error("sent to a name that is not a listener's")
	}
	a.Close()
	b.Close()
	if _, err := os.Stat(filepath.Join(dir, a.Name())); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
	if err := Send(fd, dir, "x.", a.Name()); err == nil {
		t.Error("a send to a closed listener succeeded")
	}
}
