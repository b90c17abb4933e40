package etcdstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/ticksock"
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
func pruneTickDirs(exists func(recordKey string) (bool, uint64)) []store.Pruned {
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
			out = append(out, pruneBindings(path, exists)...)
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

// A leftover record names a tree by its tick marker, and anyone who may
// write the cluster's side keys can put one: the victim's tick path is in
// /proc/net/unix, its cgroup in /proc/PID/cgroup (issue 26). So a run
// binds its tick socket to its record: beside the socket, in the tick
// directory only its user can write (0700, userTickDir), a file holding
// the record's key. A record directs signals at a tree only where that
// file says it is this record's (proven).

// bindSuffix ends the name of the file that binds a tick socket, by its
// name, to the record of the run that made it.
const bindSuffix = ".record"

// bindTick writes the binding of marker's tick socket to recordKey, where
// marker names a socket in one of this user's tick directories; Close
// removes it. Failing, it writes nothing: the record then directs no
// signals, and its tree is left to the holder's own death signal.
func (s *Store) bindTick(marker, recordKey string, cluster uint64) {
	addr, ok := strings.CutPrefix(marker, ticksock.Marker(""))
	if !ok || !ticksock.IsAddr(addr) || tickOwner(filepath.Dir(addr)) != os.Geteuid() {
		return
	}
	path := addr + bindSuffix
	if err := os.WriteFile(path, []byte(binding(cluster, recordKey)), 0o600); err != nil {
		s.log.Warn("cannot bind the tick socket to its record", "path", path, "error", err)
		return
	}
	s.boundMu.Lock()
	s.bound = append(s.bound, path)
	s.boundMu.Unlock()
}

// binding is what a binding file holds: the id of the cluster the record
// is on, and the record's key. The cluster's id keeps a prune of one
// cluster from taking the binding of another cluster's record, which it
// cannot see, for a stale one (pruneBindings): the user's tick directory
// is shared by the runs on every cluster.
func binding(cluster uint64, recordKey string) string {
	return strconv.FormatUint(cluster, 16) + " " + recordKey
}

// unbindTicks removes the bindings bindTick wrote.
func (s *Store) unbindTicks() {
	s.boundMu.Lock()
	defer s.boundMu.Unlock()
	for _, path := range s.bound {
		os.Remove(path)
	}
	s.bound = nil
}

// tickOwner is the uid whose tick directory dir is: named ticksPattern
// and its uid (the user's, or a private one's ticksPattern, uid, "-" and
// more), a directory of that uid that nobody else can enter; -1 if not.
func tickOwner(dir string) int {
	rest, ok := strings.CutPrefix(filepath.Base(dir), ticksPattern)
	if !ok {
		return -1
	}
	rest, _, _ = strings.Cut(rest, "-")
	uid, err := strconv.Atoi(rest)
	var st unix.Stat_t
	if err != nil || uid < 0 || unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR ||
		int(st.Uid) != uid || st.Mode&0o077 != 0 {
		return -1
	}
	return uid
}

// proven reports whether the record recordKey may direct signals at the
// tree its marker names. A tick marker must name a socket in a tick
// directory of its uid (tickOwner) bound to recordKey (bindTick); a
// binding this process cannot read (another user's directory, and we are
// not root) is taken as given, for signals from us cannot reach that
// user's processes anyway. A marker that is not a tick marker is left to
// the supervisor, which acts on none.
func proven(marker, recordKey string) bool {
	addr, ok := strings.CutPrefix(marker, ticksock.Marker(""))
	if !ok || !ticksock.IsAddr(addr) {
		return true
	}
	uid := tickOwner(filepath.Dir(addr))
	if uid < 0 {
		return false
	}
	fd, err := unix.Open(addr+bindSuffix, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == unix.EACCES && os.Geteuid() != 0 && uid != os.Geteuid() {
		return true
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != uid {
		return false
	}
	b := make([]byte, len(recordKey)+18)
	n, _ := unix.Read(fd, b)
	_, key, ok := strings.Cut(string(b[:max(n, 0)]), " ")
	return ok && key == recordKey
}

// pruneBindings removes the bindings in dir (the user's tick directory)
// whose socket is gone and whose record is gone too (exists): a binding
// outlives its run's socket for as long as its record may still direct
// the next holder at a tree.
func pruneBindings(dir string, exists func(recordKey string) (bool, uint64)) []store.Pruned {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []store.Pruned
	for _, e := range entries {
		sock, ok := strings.CutSuffix(e.Name(), bindSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, sock), &st) == nil {
			continue // its run lives, or its socket awaits clearDead
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		cluster, key, ok := strings.Cut(string(data), " ")
		if err != nil || !ok {
			continue
		}
		if there, ours := exists(key); there || cluster != strconv.FormatUint(ours, 16) {
			continue // its record lives, or is another cluster's
		}
		if os.Remove(path) == nil {
			out = append(out, store.Pruned{What: "stale tick binding", Path: path})
		}
	}
	return out
}

// unbind removes the binding of marker's tick socket, where this process
// may: the next holder's, once it stopped the tree (LeftoversStopped).
func unbind(marker string) {
	addr, ok := strings.CutPrefix(marker, ticksock.Marker(""))
	if !ok || !ticksock.IsAddr(addr) {
		return
	}
	if uid := tickOwner(filepath.Dir(addr)); uid >= 0 && (uid == os.Geteuid() || os.Geteuid() == 0) {
		os.Remove(addr + bindSuffix)
	}
}
