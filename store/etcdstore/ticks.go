package etcdstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
	"github.com/fencerun/fencerun/store"
)

// ticksPattern starts the names of the tick directories in $TMPDIR: the
// user's, ticksPattern and the uid, and a process's own where the user's
// cannot be used (os.MkdirTemp's pattern), as earlier fencerun made for
// every run.
const ticksPattern = "fencerun-ticks-"

// userTickDir is the user's tick directory, $TMPDIR/fencerun-ticks-UID
// (as tmux's tmux-UID): made 0700 if missing, and used only if it is a
// directory of this user that nobody else can enter. Every etcd run puts
// its sockets there and removes those of dead runs it finds (a wrapper
// killed by SIGKILL cannot remove its own), so that they do not pile up:
// one directory a user, holding at most the sockets of runs killed since
// the last one started (issue 26).
func userTickDir() (string, error) {
	dir := filepath.Join(os.TempDir(), ticksPattern+strconv.Itoa(os.Geteuid()))
	if err := unix.Mkdir(dir, 0o700); err != nil && err != unix.EEXIST {
		return "", &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("etcdstore: %s is not a private directory of uid %d", dir, os.Geteuid())
	}
	clearDead(dir)
	return dir, nil
}

// clearDead removes the sockets of dead runs in dir (deadSockets).
func clearDead(dir string) []store.Pruned {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	dead, _ := deadSockets(fd, dir)
	var out []store.Pruned
	for _, name := range dead {
		if unix.Unlinkat(fd, name, 0) == nil {
			out = append(out, store.Pruned{What: "stale socket", Path: filepath.Join(dir, name)})
		}
	}
	return out
}

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
		if e.Name() == ticksPattern+strconv.Itoa(os.Geteuid()) {
			out = append(out, clearDead(path)...) // the user's: kept
			continue
		}
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
	names, all := deadSockets(fd, dir)
	if !all || len(names) == 0 {
		return nil
	}
	for i, name := range names {
		if unix.Unlinkat(fd, name, 0) != nil {
			return names[:i]
		}
	}
	return names
}

// deadSockets lists the sockets in dir (open as fd) of runs that are gone:
// stale (unixsock.Stale) or left under a temporary name in a bind
// (unixsock.LeftInBind); all says whether that is every entry.
func deadSockets(fd int, dir string) (names []string, all bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	all = true
	for _, e := range entries {
		if _, tmp := strings.CutPrefix(e.Name(), unixsock.BindPrefix); tmp && unixsock.LeftInBind(fd, dir, e.Name()) ||
			!tmp && unixsock.Stale(fd, dir, e.Name()) {
			names = append(names, e.Name())
			continue
		}
		all = false
	}
	return names, all
}
