package statefs

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// Who may use a state directory (S9). A directory is one of three kinds:
//
//   - a per-user store: owned by the caller, not writable by group or
//     others; files 0600, directories 0700;
//   - a group store (as `fencerun init --group G` makes it): group G, mode
//     2770, owned by root or by a member of G; files 0660 and directories
//     2770 in G, modes set explicitly with fchmod (never left to the
//     umask). Members of G and root share its keys and are trusted with
//     each other's leases: they can read each other's tokens and revoke
//     each other. Nobody else can enter it.
//   - the directory beside a store that holds its resident role's files:
//     anyone's (it is the application's), but not writable by group or
//     others unless sticky, since they could replace the role's files;
//     every file in it must be the caller's (in a sticky directory such as
//     /tmp only a file's owner may replace it). A Look at it, which only
//     reads (status), takes files of other users too.
//
// Everything else another user can write is refused, naming the directory
// and the fix. So is a store root with an ancestor directory that another
// user can write, unless it is sticky and our path's entry in it is ours
// or root's (as /tmp): whoever can rename an ancestor can swap the whole
// root for another under a running holder.

// Access is the policy of one state directory and everything below it.
type Access struct {
	Shared bool // a group store
	GID    int  // the store's group, when Shared
	// Beside: a resident role's directory beside its store, and Look:
	// only reading it.
	Beside, Look bool
}

// FileMode is the mode of the files it creates.
func (a Access) FileMode() uint32 {
	if a.Shared {
		return 0o660
	}
	return 0o600
}

// DirMode is the mode of the directories it creates.
func (a Access) DirMode() uint32 {
	if a.Shared {
		return 0o2770
	}
	return 0o700
}

// OpenBeside opens the directory at path (absolute, its symlinks
// resolved) that holds a resident role's files beside its store, with
// the Beside policy, and with look only to read.
func OpenBeside(path string, look bool) (Dir, error) {
	fd, err := unix.Open(path, dirFlags, 0)
	if err != nil {
		return Dir{FD: -1}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	d := Dir{FD: fd, Path: filepath.Clean(path), Access: Access{Beside: true, Look: look}}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.Close()
		return Dir{FD: -1}, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := d.Check(st, d.Path); err != nil {
		d.Close()
		return Dir{FD: -1}, err
	}
	return d, nil
}

// checkFile refuses a regular file (st, at path) that a must not trust:
// in a directory beside a store, another user's, unless only looking.
// Elsewhere the directories' own checks keep others out.
func (a Access) checkFile(st unix.Stat_t, path string) error {
	if a.Beside && !a.Look && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not %d", store.ErrUnsafe, path, st.Uid, os.Geteuid())
	}
	return nil
}

// RootAccess tells the kind of the state root open as fd from its owner
// and mode, and refuses a root the caller may not use.
func RootAccess(fd int, path string) (Access, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Access{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&0o7777 == 0o2770 {
		a := Access{Shared: true, GID: int(st.Gid)}
		if err := a.Check(st, path); err != nil {
			return Access{}, err
		}
		if euid := os.Geteuid(); euid != 0 && !IsMember(euid, a.GID) {
			return Access{}, fmt.Errorf("%w: %s is the group store of %s, and uid %d is not a member", store.ErrUnsafe, path, GroupName(a.GID), euid)
		}
		return a, nil
	}
	return Access{}, Access{}.Check(st, path)
}

// Check refuses a directory (st, at path) that a does not allow: in a
// store, another user's or one others may write; beside a store, one
// that group or others may write without the sticky bit.
func (a Access) Check(st unix.Stat_t, path string) error {
	if a.Beside {
		// Its owner may be anyone; only who else may write it counts.
		if !a.Look && st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return fmt.Errorf("%w: the store directory %s is writable by group or others (mode %#o), who could replace the role's lock file; fix: chmod go-w %s, or make it sticky", store.ErrUnsafe, path, st.Mode&0o7777, path)
		}
		return nil
	}
	if a.Shared {
		switch {
		case int(st.Gid) != a.GID:
			return fmt.Errorf("%w: %s belongs to group %s, not to the store's group %s; fix: chgrp %s %s", store.ErrUnsafe, path, GroupName(int(st.Gid)), GroupName(a.GID), GroupName(a.GID), path)
		case st.Mode&0o7777 != 0o2770:
			return fmt.Errorf("%w: %s has mode %#o, not 2770 as every directory of a group store; fix: chmod 2770 %s", store.ErrUnsafe, path, st.Mode&0o7777, path)
		case st.Uid != 0 && !IsMember(int(st.Uid), a.GID):
			return fmt.Errorf("%w: %s is owned by uid %d, who is not a member of the store's group %s", store.ErrUnsafe, path, st.Uid, GroupName(a.GID))
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

// CheckAncestors refuses a state root (absolute, clean) below a directory
// that a user other than the caller and root can write, unless that
// directory is sticky and the entry of our path in it is ours or root's.
// Both the path as given and the real path behind its symlinks are
// checked, and a symlink on the way must be ours or root's too: whoever
// can change a lookup can swap the root.
func CheckAncestors(root string) error {
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

// IsMember reports whether uid is a member of group gid, by its primary
// group or the group database.
func IsMember(uid, gid int) bool {
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

func GroupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}
