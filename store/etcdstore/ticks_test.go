package etcdstore

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// A run SIGKILLed between its tick socket's bind and rename left its
// private directory holding the socket under its temporary name: prune
// removes the directory once unixsock.LeftInBind takes the socket for
// junk, and keeps it while the socket is fresh (a bind in progress) or
// bound (a live run's).
func TestPruneTickDirsTakesASocketLeftInItsBind(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	mk := func(name string) string {
		dir := filepath.Join(tmp, ticksPattern+name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	bind := func(dir string) *net.UnixListener {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, unixsock.BindPrefix+"t-x"), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		return ln
	}
	dead, live := mk("dead"), mk("live")
	bind(dead).Close()
	defer bind(live).Close()
	if out := pruneTickDirs(func(string) (bool, uint64) { return true, 1 }); len(out) != 0 {
		t.Fatalf("pruned %+v with the sockets fresh, want nothing", out)
	}
	defer func(age time.Duration) { unixsock.BindAge = age }(unixsock.BindAge)
	unixsock.BindAge = 0
	out := pruneTickDirs(func(string) (bool, uint64) { return true, 1 })
	if len(out) != 1 || out[0].Path != filepath.Join(dead, unixsock.BindPrefix+"t-x") {
		t.Errorf("pruned %+v, want the dead run's socket alone", out)
	}
	for dir, gone := range map[string]bool{dead: true, live: false} {
		if _, err := os.Lstat(dir); os.IsNotExist(err) != gone {
			t.Errorf("%s after prune: %v, want gone %v", dir, err, gone)
		}
	}
}

// A binding whose socket is gone is removed by a prune of its own
// cluster once its record is gone there, never by a prune of another
// cluster, which cannot see the record: the user's tick directory is
// shared by the runs on every cluster (a prune of another cluster took a
// dead holder's binding, and the next holder then left its leftover).
func TestPruneBindingsKeepsAnotherClustersBinding(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t-0123456789abcdef0123456789abcdef"+bindSuffix)
	if err := os.WriteFile(path, []byte(binding(0xa1, "_fencerun/leftovers/k/1")), 0o600); err != nil {
		t.Fatal(err)
	}
	gone := func(cluster uint64) func(string) (bool, uint64) {
		return func(string) (bool, uint64) { return false, cluster }
	}
	if out := pruneBindings(dir, gone(0xb2)); len(out) != 0 {
		t.Fatalf("a prune of another cluster removed %+v", out)
	}
	if out := pruneBindings(dir, gone(0xa1)); len(out) != 1 || out[0].Path != path {
		t.Errorf("a prune of its own cluster removed %+v, want %s", out, path)
	}
}
