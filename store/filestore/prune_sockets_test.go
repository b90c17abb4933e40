package filestore

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// A run SIGKILLed between its tick socket's bind and rename left the
// socket under its temporary name in ticks/, which no guard lock sweeps:
// prune removes it once unixsock.LeftInBind takes it for junk, and
// leaves a live socket under a temporary name (a bind in progress) and
// anything that is no tick socket's.
func TestPruneRemovesATickSocketLeftInItsBind(t *testing.T) {
	s, _ := newStore(t)
	dir, err := s.TickDir()
	if err != nil {
		t.Fatal(err)
	}
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	bind := func(name string) *net.UnixListener {
		addr, err := unixsock.Addr(dirfd, dir, name) // the test's root is too deep for sun_path
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		return ln
	}
	dead := unixsock.BindPrefix + "t-" + strings.Repeat("ab", 16)
	live := unixsock.BindPrefix + "t-" + strings.Repeat("cd", 16)
	other := unixsock.BindPrefix + "x-" + strings.Repeat("ef", 16)
	bind(dead).Close()
	bind(other).Close()
	defer bind(live).Close()

	// Fresh, the dead one could be a bind in progress: kept.
	if out, err := s.Prune(context.Background()); err != nil || len(out) != 0 {
		t.Fatalf("prune of a fresh socket under a temporary name: %v, %+v; want nothing removed", err, out)
	}
	defer func(age time.Duration) { unixsock.BindAge = age }(unixsock.BindAge)
	unixsock.BindAge = 0
	out, err := s.Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].What != "stale socket" || out[0].Path != filepath.Join(dir, dead) {
		t.Errorf("prune removed %+v, want the stale socket %s alone", out, filepath.Join(dir, dead))
	}
	for name, gone := range map[string]bool{dead: true, live: false, other: false} {
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) != gone {
			t.Errorf("%s after prune: %v, want gone %v", name, err, gone)
		}
	}
}
