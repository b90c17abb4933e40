package filestore

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/store"
)

// Who may use a state root (S9). A root is one of two kinds, told by its
// own mode:
//
//   - a per-user store: owned by the caller, not writable by group or
//     others; files 0600, directories 0700;
//   - a group store (as `fencerun init --group G` makes it): group G, mode
//     2770, owned by root or by a member of G; files 0660 and directories
//     2770 in G, modes set explicitly with fchmod (never left to the
//     umask). Members of G and root share its keys and are trusted with
//     each other's leases: they can read each other's tokens and revoke
//     each other. Nobody else can enter it.
//
// Everything else another user can write is refused, naming the directory
// and the fix. So is a root with an ancestor directory that another user
// can write, unless it is sticky and our path's entry in it is ours or
// root's (as /tmp): whoever can rename an ancestor can swap the whole root
// for another under a running holder.

// access is the policy of one store: the kind, and for a group store its
// group.
type access struct {
	shared bool // a group store
	gid    int  // the store's group, when shared
}

func (a access) fileMode() uint32 {
	if a.shared {
		return 0o660
	}
	return fileMode
}

func (a access) dirMode() uint32 {
	if a.shared {
		return 0o2770
	}
	return 0o700
}

// mark returns trees read from this store's records, marked Shared in a
// group store, whose every member may write them (see store.Leftover). A
// private store's are not: only its owner (the caller) and root write it.
// In a group store a marker is kept only if it names a tick socket of
// this store's ticks directory: tick socket paths are public
// (/proc/net/unix), and a member must not name another store's tree.
func (s *Store) mark(trees []store.Leftover) []store.Leftover {
	if !s.access.shared {
		return trees
	}
	out := slices.Clone(trees)
	for i := range out {
		out[i].Shared = true
		addr, _ := strings.CutPrefix(out[i].Marker, fence.TickMarker(""))
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

// rootAccess tells the kind of the state root open as fd from its owner
// and mode, and refuses a root the caller may not use.
func rootAccess(fd int, path string) (access, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return access{}, fmt.Errorf("filestore: stat %s: %w", path, err)
	}
	if st.Mode&0o7777 == 0o2770 {
		a := access{shared: true, gid: int(st.Gid)}
		if err := a.check(st, path); err != nil {
			return access{}, err
		}
		if euid := os.Geteuid(); euid != 0 && !isMember(euid, a.gid) {
			return access{}, fmt.Errorf("%w: %s is the group store of %s, and uid %d is not a member", store.ErrUnsafe, path, groupName(a.gid), euid)
		}
		return a, nil
	}
	return access{}, access{}.check(st, path)
}

// check refuses a directory of this store (st, at path) that does not
// belong to it: another user's, or one others may write.
func (a access) check(st unix.Stat_t, path string) error {
	if a.shared {
		switch {
		case int(st.Gid) != a.gid:
			return fmt.Errorf("%w: %s belongs to group %s, not to the store's group %s; fix: chgrp %s %s", store.ErrUnsafe, path, groupName(int(st.Gid)), groupName(a.gid), groupName(a.gid), path)
		case st.Mode&0o7777 != 0o2770:
			return fmt.Errorf("%w: %s has mode %#o, not 2770 as every directory of a group store; fix: chmod 2770 %s", store.ErrUnsafe, path, st.Mode&0o7777, path)
		case st.Uid != 0 && !isMember(int(st.Uid), a.gid):
			return fmt.Errorf("%w: %s is owned by uid %d, who is not a member of the store's group %s", store.ErrUnsafe, path, st.Uid, groupName(a.gid))
		}
		return nil
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%w: %s is owned by uid %d, not by uid %d; use a state directory of your own, or share keys with other users through a group store (fencerun init --group GROUP DIR)", store.ErrUnsafe, path, st.Uid, euid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by group or others (mode %#o); fix: chmod go-w %s, or share it properly with fencerun init --group GROUP %s", store.ErrUnsafe, path, st.Mode&0o7777, path, path)
	}
	return nil
}

// checkAncestors refuses a state root (absolute, clean) below a directory
// that a user other than the caller and root can write, unless that
// directory is sticky and the entry of our path in it is ours or root's.
// Both the path as given and the real path behind its symlinks are
// checked, and a symlink on the way must be ours or root's too: whoever
// can change a lookup can swap the root.
func checkAncestors(root string) error {
	if err := checkPath(root); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(filepath.Dir(root))
	if err != nil || real == filepath.Dir(root) {
		return nil // a missing parent: Open fails on it anyway
	}
	return checkPath(filepath.Join(real, filepath.Base(root)))
}

func checkPath(root string) error {
	euid := uint32(os.Geteuid())
	trusted := func(uid uint32) bool { return uid == euid || uid == 0 }
	parts := strings.Split(strings.TrimPrefix(root, "/"), "/")
	parent := "/"
	for _, name := range parts {
		var pst, cst unix.Stat_t
		if err := unix.Stat(parent, &pst); err != nil {
			return nil // missing: Open fails on it
		}
		child := filepath.Join(parent, name)
		if err := unix.Lstat(child, &cst); err != nil {
			cst.Uid = euid // missing: it will be ours
		}
		// The parent's owner can always rename in it; others can when it
		// is writable for them and not sticky, or when sticky, rename only
		// what they own.
		if !trusted(pst.Uid) || pst.Mode&0o022 != 0 && pst.Mode&unix.S_ISVTX == 0 {
			return ancestorError(root, parent, pst)
		}
		if pst.Mode&0o022 != 0 && !trusted(cst.Uid) {
			return fmt.Errorf("%w: state directory %s: %s is in the sticky directory %s but owned by uid %d, who could replace it; fix: use a directory of your own", store.ErrUnsafe, root, child, parent, cst.Uid)
		}
		if cst.Mode&unix.S_IFMT == unix.S_IFLNK && !trusted(cst.Uid) {
			return fmt.Errorf("%w: state directory %s: %s is a symlink owned by uid %d, who could point it elsewhere", store.ErrUnsafe, root, child, cst.Uid)
		}
		parent = child
	}
	return nil
}

func ancestorError(root, parent string, st unix.Stat_t) error {
	return fmt.Errorf("%w: state directory %s is below %s (owner uid %d, mode %#o), which another user can write and so rename the state away; fix: use a state directory whose every parent only you or root can write", store.ErrUnsafe, root, parent, st.Uid, st.Mode&0o7777)
}

// members caches group memberships: uid and gid to whether uid is in it.
var members sync.Map

// isMember reports whether uid is a member of group gid, by its primary
// group or the group database.
func isMember(uid, gid int) bool {
	type pair struct{ uid, gid int }
	if v, ok := members.Load(pair{uid, gid}); ok {
		return v.(bool)
	}
	in := false
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		if u.Gid == strconv.Itoa(gid) {
			in = true
		} else if gids, err := u.GroupIds(); err == nil {
			for _, g := range gids {
				in = in || g == strconv.Itoa(gid)
			}
		}
	}
	members.Store(pair{uid, gid}, in)
	return in
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
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
	if euid := os.Geteuid(); euid != 0 && !isMember(euid, gid) {
		return false, fmt.Errorf("%w %s: uid %d cannot create a store of it", ErrNotMember, groupName(gid), euid)
	}
	if err := checkAncestors(root); err != nil {
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
	a := access{shared: true, gid: gid}
	if a.check(st, root) == nil {
		already = true
	} else {
		if int(st.Uid) != os.Geteuid() {
			return false, fmt.Errorf("%w: %s exists and is owned by uid %d; init makes a group store of a new or empty directory of yours", store.ErrUnsafe, root, st.Uid)
		}
		names, err := listDir(dir{fd: fd, path: root})
		if err != nil {
			return false, err
		}
		if len(names) > 0 {
			return false, fmt.Errorf("%w: %s exists and is not empty; init makes a group store of a new or empty directory", store.ErrUnsafe, root)
		}
		if err := unix.Fchown(fd, -1, gid); err != nil {
			return false, fmt.Errorf("filestore: chgrp %s: %w", root, err)
		}
		if err := unix.Fchmod(fd, a.dirMode()); err != nil {
			return false, fmt.Errorf("filestore: chmod %s: %w", root, err)
		}
	}
	keys, err := openDir(dir{fd: fd, path: root, access: a}, "keys", true)
	if err != nil {
		return false, err
	}
	keys.close()
	return already, nil
}
