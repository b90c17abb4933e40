package statefs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// Dir is an open state directory and its path, for messages. Everything
// below it is reached relative to its descriptor, with O_NOFOLLOW, so a
// symlink planted anywhere is refused instead of followed.
type Dir struct {
	FD     int
	Path   string
	Access // whose directory it is, inherited by everything below
}

// Join is the path of name in d, for messages.
func (d Dir) Join(name string) string { return d.Path + "/" + name }

// Close closes d's descriptor, if it is open.
func (d Dir) Close() {
	if d.FD >= 0 {
		unix.Close(d.FD)
	}
}

// MaxFileSize bounds what is read from a state file: records, queue
// entries and payloads are at most two slots of internal/statefs; anything
// larger is not one.
const MaxFileSize = 64 << 10

// dirFlags open a directory, never through a symlink.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// OpenDir opens (and with create, first makes) the directory name in d.
// It refuses a symlink (ErrUnsafe), a non-directory (ErrCorrupt) and a
// directory that its Access does not allow (ErrUnsafe; access_linux.go).
// A directory it creates gets the mode of d's Access explicitly. A
// missing directory gives an error that is fs.ErrNotExist.
func (d Dir) OpenDir(name string, create bool) (Dir, error) {
	fd, err := unix.Openat(d.FD, name, dirFlags, 0)
	if err == unix.ENOENT && create {
		if err := d.makeDir(name); err != nil {
			return Dir{FD: -1}, err
		}
		fd, err = unix.Openat(d.FD, name, dirFlags, 0)
	}
	if err != nil {
		return Dir{FD: -1}, d.openError(name, err)
	}
	sub := Dir{FD: fd, Path: d.Join(name), Access: d.Access}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		sub.Close()
		return Dir{FD: -1}, fmt.Errorf("stat %s: %w", sub.Path, err)
	}
	if err := sub.Check(st, sub.Path); err != nil {
		sub.Close()
		return Dir{FD: -1}, err
	}
	return sub, nil
}

// makeDir creates the directory name in d with its mode. In a group store
// the umask may take group bits, so the directory is made under a
// temporary name, given its mode explicitly, and only then renamed into
// place: the other members never see it with the wrong mode. (Its group
// comes from the parent's setgid bit.)
func (d Dir) makeDir(name string) error {
	path := d.Join(name)
	if !d.Shared {
		if err := unix.Mkdirat(d.FD, name, d.DirMode()); err != nil && err != unix.EEXIST {
			return fmt.Errorf("create %s: %w", path, err)
		}
		return nil
	}
	tmp := TempName()
	if err := unix.Mkdirat(d.FD, tmp, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := unix.Fchmodat(d.FD, tmp, d.DirMode(), 0); err != nil {
		unix.Unlinkat(d.FD, tmp, unix.AT_REMOVEDIR)
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	err := unix.Renameat2(d.FD, tmp, d.FD, name, unix.RENAME_NOREPLACE)
	if err != nil {
		unix.Unlinkat(d.FD, tmp, unix.AT_REMOVEDIR)
		if err != unix.EEXIST {
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	return nil
}

// OpenFile opens the regular file name in d. It refuses a symlink
// (ErrUnsafe), anything but a regular file (ErrCorrupt), and a file its
// Access does not allow (ErrUnsafe); O_NONBLOCK keeps a planted FIFO from
// blocking the open. A missing file gives an error that is fs.ErrNotExist.
func (d Dir) OpenFile(name string, flags int) (int, error) {
	if flags&unix.O_CREAT != 0 && d.Shared {
		// A lock file the other members must open: never visible with a
		// mode the umask took bits from.
		fd, err := d.OpenRaw(name, flags&^unix.O_CREAT)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			if err == nil {
				if _, err := d.CheckFile(fd, name); err != nil {
					unix.Close(fd)
					return -1, err
				}
			}
			return fd, err
		}
		if _, err := d.WriteAtomic(name, nil, WriteOpts{NoReplace: true}); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
	}
	fd, err := d.OpenRaw(name, flags)
	if err != nil {
		return -1, err
	}
	if _, err := d.CheckFile(fd, name); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// OpenRaw is OpenFile without the checks of the open file (CheckFile),
// for callers that stat it anyway.
func (d Dir) OpenRaw(name string, flags int) (int, error) {
	fd, err := unix.Openat(d.FD, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, d.FileMode())
	if err != nil {
		return -1, d.openError(name, err)
	}
	return fd, nil
}

// CheckFile checks the file name in d open as fd: a regular file
// (ErrCorrupt otherwise) that d's Access allows (ErrUnsafe otherwise). It
// returns its stat.
func (d Dir) CheckFile(fd int, name string) (unix.Stat_t, error) {
	path := d.Join(name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("%w: %s is %s, not a regular file", store.ErrCorrupt, path, FileKind(st.Mode))
	}
	return st, d.checkFile(st, path)
}

// openError says why opening name in d failed, in the terms of package
// store: a symlink is unsafe, a file of the wrong kind is corrupt.
func (d Dir) openError(name string, err error) error {
	path := d.Join(name)
	switch err {
	case unix.ELOOP:
		return fmt.Errorf("%w: %s is a symlink; refusing to follow it", store.ErrUnsafe, path)
	case unix.EISDIR:
		return fmt.Errorf("%w: %s is a directory, not a regular file", store.ErrCorrupt, path)
	case unix.ENOTDIR:
		// O_DIRECTORY|O_NOFOLLOW reports a symlink as ENOTDIR.
		var st unix.Stat_t
		if unix.Fstatat(d.FD, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return fmt.Errorf("%w: %s is a symlink; refusing to follow it", store.ErrUnsafe, path)
			}
			return fmt.Errorf("%w: %s is %s, not a directory", store.ErrCorrupt, path, FileKind(st.Mode))
		}
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// FileKind names the kind of file mode says, for messages.
func FileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a fifo"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFREG:
		return "a regular file"
	}
	return "of unknown kind"
}

// ReadFile reads the regular file name in d whole.
func (d Dir) ReadFile(name string) ([]byte, error) {
	fd, err := d.OpenFile(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return ReadFD(fd, d.Join(name))
}

// ReadFD reads the file open as fd (at path, for messages) whole, from
// offset 0 to its end, without a stat: one pread usually does, as a
// record file (two 4 KiB slots) fits the first buffer, and a read short
// of the room it had is the end of a regular file. A file over
// MaxFileSize is store.ErrCorrupt.
func ReadFD(fd int, path string) ([]byte, error) {
	buf := make([]byte, 0, 2*MinSlotSize+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := buf[len(buf):cap(buf)]
		n, err := unix.Pread(fd, room, int64(len(buf)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		buf = buf[:len(buf)+n]
		if len(buf) > MaxFileSize {
			return nil, fmt.Errorf("%w: %s is over %d bytes", store.ErrCorrupt, path, MaxFileSize)
		}
		if n < len(room) {
			return buf, nil
		}
	}
}

// List lists the names in d, in no particular order.
func (d Dir) List() ([]string, error) {
	fd, err := unix.Openat(d.FD, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", d.Path, err)
	}
	f := os.NewFile(uintptr(fd), d.Path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d.Path, err)
	}
	return names, nil
}

// ErrNoJunk: ClearJunk found nothing to clear.
var ErrNoJunk = errors.New("nothing to clear")

// ClearJunk removes what stands where the regular file name belongs in d:
// an empty directory, a FIFO, a socket, a device. A symlink is refused as
// unsafe; a regular file or nothing gives ErrNoJunk.
func (d Dir) ClearJunk(name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(d.FD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return ErrNoJunk
	}
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ErrNoJunk
	case unix.S_IFLNK:
		return fmt.Errorf("%w: %s is a symlink; remove it by hand after checking who planted it", store.ErrUnsafe, d.Join(name))
	case unix.S_IFDIR:
		err = unix.Unlinkat(d.FD, name, unix.AT_REMOVEDIR)
	default:
		err = unix.Unlinkat(d.FD, name, 0)
	}
	if err != nil {
		return fmt.Errorf("clear %s, which is %s: %w", d.Join(name), FileKind(st.Mode), err)
	}
	return nil
}

// FileID is which file a descriptor or a name was: its device and inode.
// A caller that keeps a file open across operations (a holder's guard and
// record) compares the ID of what it holds with that of the name, which
// someone may have renamed, replaced or removed since it was opened.
type FileID struct{ Dev, Ino uint64 }

// IDOf is the FileID of the file open as fd (at path, for messages).
func IDOf(fd int, path string) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return FileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// Named is the FileID and size of what name in d names now, not following
// a symlink: one fstatat, cheaper than the open and close that would find
// out the same. A missing name gives an error that is fs.ErrNotExist.
func (d Dir) Named(name string) (FileID, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.FD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return FileID{}, 0, fmt.Errorf("stat %s: %w", d.Join(name), err)
	}
	return FileID{Dev: st.Dev, Ino: st.Ino}, st.Size, nil
}
