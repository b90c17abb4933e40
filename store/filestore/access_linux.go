package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/ticksock"
	"github.com/fencerun/fencerun/store"
)

// Who may use a state root (S9) is internal/statefs's Access: a
// per-user store or a group store, told by the root's own mode.

// mark returns trees read from this store's records as this host's, and
// marked Shared in a group store.
//
// A file store is one host's (see the package comment): a tree recorded
// under another host name is this host's all the same, recorded before
// the hostname changed or by a holder in a UTS namespace of its own (a
// container or unit sharing the state directory, `unshare -u`). Left to
// "that host", it would run beside the next holder's command for good
// (S2); looked for here, by its cgroup or marker, it is found or is gone.
//
// In a group store, whose every member may write the records, a marker is
// kept only if it names a tick socket of this store's ticks directory:
// tick socket paths are public (/proc/net/unix), and a member must not
// name another store's tree. A private store's are not Shared: only its
// owner (the caller) and root write it.
func (s *Store) mark(trees []store.Leftover) []store.Leftover {
	out := slices.Clone(trees)
	for i := range out {
		out[i].Host = s.host
		if !s.access.Shared {
			continue
		}
		out[i].Shared = true
		addr, _ := strings.CutPrefix(out[i].Marker, ticksock.Marker(""))
		if !s.ownTicks(filepath.Dir(addr)) {
			out[i].Marker = ""
		}
	}
	return out
}

// ownTicks says whether d is this store's ticks directory, as spelled by
// this process or by another that reached the root through a symlink.
func (s *Store) ownTicks(d string) bool {
	own := filepath.Join(s.real, ticksDir)
	if d == filepath.Join(s.root, ticksDir) || d == own {
		return true
	}
	r, err := filepath.EvalSymlinks(d)
	return err == nil && r == own
}

// ErrNotMember: init was asked for a group store of a group the caller is
// not in.
var ErrNotMember = errors.New("filestore: not a member of the group")

// Init makes dir a group store of the group gid (S9 in the contract): it creates dir
// (its parent must exist) or takes an empty one of the caller's, sets its
// group to gid and its mode to 2770 explicitly, and creates its keys
// directory. The caller must be root or a member of the group. A dir that
// already is a group store of gid is left as it is (already reports that).
func Init(path string, gid int) (already bool, err error) {
	root, err := filepath.Abs(path)
	if err != nil {
		return false, fmt.Errorf("filestore: state directory %s: %w", path, err)
	}
	root = filepath.Clean(root)
	if euid := os.Geteuid(); euid != 0 && !statefs.IsMember(euid, gid) {
		return false, fmt.Errorf("%w %s: uid %d cannot create a store of it", ErrNotMember, statefs.GroupName(gid), euid)
	}
	if err := statefs.CheckAncestors(root); err != nil {
		return false, err
	}
	if err := unix.Mkdir(root, 0o700); err != nil && err != unix.EEXIST {
		return false, fmt.Errorf("filestore: create state directory %s: %w", root, err)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("filestore: open state directory %s: %w", root, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("filestore: stat %s: %w", root, err)
	}
	a := statefs.Access{Shared: true, GID: gid}
	if a.Check(st, root) == nil {
		already = true
	} else {
		if int(st.Uid) != os.Geteuid() {
			return false, fmt.Errorf("%w: %s exists and is owned by uid %d; init makes a group store of a new or empty directory of yours", store.ErrUnsafe, root, st.Uid)
		}
		names, err := dir{FD: fd, Path: root}.List()
		if err != nil {
			return false, err
		}
		if len(names) > 0 {
			return false, fmt.Errorf("%w: %s exists and is not empty; init makes a group store of a new or empty directory", store.ErrUnsafe, root)
		}
		if err := unix.Fchown(fd, -1, gid); err != nil {
			return false, fmt.Errorf("filestore: chgrp %s: %w", root, err)
		}
		if err := unix.Fchmod(fd, a.DirMode()); err != nil {
			return false, fmt.Errorf("filestore: chmod %s: %w", root, err)
		}
	}
	keys, err := dir{FD: fd, Path: root, Access: a}.OpenDir("keys", true)
	if err != nil {
		return false, err
	}
	keys.Close()
	return already, nil
}
