package etcdstore

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// ticksPattern names the private tick directories TickDir makes in
// $TMPDIR (os.MkdirTemp's pattern).
const ticksPattern = "fencerun-ticks-"

// pruneTickDirs removes what runs that died without their Close (SIGKILL)
// left in $TMPDIR: a tick directory of this user holding nothing but tick
// sockets no socket is bound to (unixsock.Stale). A live run's directory
// is never removed: its socket is bound, or, in the moment between the
// directory and the socket, it is empty, and an empty one is kept (so one
// of a run killed in that moment stays).
func pruneTickDirs() []store.Pruned {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil
	}
	var out []store.Pruned
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ticksPattern) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || int(st.Uid) != os.Geteuid() {
			continue
		}
		if stale := staleTicks(path); len(stale) > 0 && unix.Rmdir(path) == nil {
			for _, name := range stale {
				out = append(out, store.Pruned{What: "stale socket", Path: filepath.Join(path, name)})
			}
		}
	}
	return out
}

// staleTicks removes the sockets in dir if every entry is a stale tick
// socket (or one left under its temporary name: unixsock.LeftInBind), and
// returns their names; it removes nothing otherwise.
func staleTicks(dir string) []string {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return nil
	}
	var names []string
	for _, e := range entries {
		// A run killed between its socket's bind and rename left it
		// under the temporary name (unixsock.LeftInBind).
		final, tmp := strings.CutPrefix(e.Name(), unixsock.BindPrefix)
		if !strings.HasPrefix(final, "t-") ||
			tmp && !unixsock.LeftInBind(fd, dir, e.Name()) || !tmp && !unixsock.Stale(fd, dir, e.Name()) {
			return nil
		}
		names = append(names, e.Name())
	}
	for i, name := range names {
		if unix.Unlinkat(fd, name, 0) != nil {
			return names[:i]
		}
	}
	return names
}
