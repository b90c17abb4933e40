package resident

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// paths are the files of one store's role.
type paths struct {
	store    string // absolute path of the store file
	dir      string
	lock     string
	fence    string
	handover string
	cancel   string
}

// StorePath is the store file that storePath names, as the role knows it
// (R1): absolute, with every symlink on the way resolved, so that a link to
// the store and the store itself are one role. The store file need not
// exist (a symlink to it may dangle); a path that names a directory (or
// ends in a slash) is refused,
// since its lock would land in the parent. It creates nothing.
func StorePath(storePath string) (string, error) { return storePathAt(storePath, 0) }

func storePathAt(storePath string, depth int) (string, error) {
	if storePath == "" {
		return "", errors.New("resident: empty store path")
	}
	if strings.HasSuffix(storePath, "/") {
		return "", fmt.Errorf("resident: --resident %s names a directory; give the store file (for example %sapp.db)", storePath, storePath)
	}
	abs, err := filepath.Abs(storePath)
	if err != nil {
		return "", fmt.Errorf("resident: store path %s: %w", storePath, err)
	}
	dir, base := filepath.Split(abs)
	if base == "" || base == "." || base == ".." {
		return "", fmt.Errorf("resident: store path %s names no file", storePath)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		if fi, lerr := os.Lstat(abs); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// A link to a store not created yet: the role of its target.
			target, err := os.Readlink(abs)
			if err != nil || depth >= 40 {
				return "", fmt.Errorf("resident: store path %s: a symlink that cannot be followed", storePath)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(dir, target)
			}
			return storePathAt(target, depth+1)
		}
		// A missing directory stays as given: a status of it is free, and
		// taking the role fails on its lock file, naming it.
		realDir, derr := filepath.EvalSymlinks(dir)
		if derr != nil {
			realDir = filepath.Clean(dir)
		}
		real = filepath.Join(realDir, base)
	} else if err != nil {
		return "", fmt.Errorf("resident: store path %s: %w", storePath, err)
	}
	if fi, err := os.Stat(real); err == nil && fi.IsDir() {
		return "", fmt.Errorf("resident: --resident %s names a directory; give the store file in it (for example %s)", storePath, filepath.Join(storePath, "app.db"))
	}
	return real, nil
}

func pathsOf(storePath string) (paths, error) {
	abs, err := StorePath(storePath)
	if err != nil {
		return paths{}, err
	}
	dir := filepath.Dir(abs)
	return paths{
		store:    abs,
		dir:      filepath.Clean(dir),
		lock:     abs + ".resident.lock",
		fence:    abs + ".resident.fence",
		handover: abs + ".resident.handover",
		cancel:   abs + ".resident.cancel",
	}, nil
}

// openFlags: never follow a symlink planted in place of one of our files,
// never block on a FIFO planted there, never leak into the command.
const openFlags = unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK

// openState opens one of the role's files and checks that it is a regular
// file, and, unless only looking (status), that it is ours: a file planted
// by another user is not trusted. Errors name the file: a symlink or a
// foreign file is store.ErrUnsafe, a directory or other non-regular file
// store.ErrCorrupt; a missing file is returned as is
// (errors.Is(err, os.ErrNotExist)).
func openState(path string, flags int, look bool) (int, error) {
	fd, err := unix.Open(path, flags|openFlags, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("%w: %s is a symlink", store.ErrUnsafe, path)
	case errors.Is(err, unix.EISDIR):
		return -1, fmt.Errorf("%w: %s is a directory", store.ErrCorrupt, path)
	case err != nil:
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: %s is not a regular file", store.ErrCorrupt, path)
	}
	if !look && int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: %s is owned by uid %d, not %d", store.ErrUnsafe, path, st.Uid, os.Geteuid())
	}
	return fd, nil
}

// readAll reads a whole file from offset 0.
func readAll(fd int, path string) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	buf := make([]byte, st.Size+512)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}

// writeAtomic replaces path with data: a temp file beside it, fsync,
// rename, fsync of the directory (B5: no half-written file, ever). The
// temp file is removed on failure.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp-" + randomID()
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|openFlags, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	err = writeFull(fd, data, 0)
	if err == nil {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlink(tmp)
		return &os.PathError{Op: "write", Path: tmp, Err: err}
	}
	if err := unix.Rename(tmp, path); err != nil {
		unix.Unlink(tmp)
		return &os.PathError{Op: "rename", Path: path, Err: err}
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

func writeFull(fd int, data []byte, off int64) error {
	for len(data) > 0 {
		n, err := unix.Pwrite(fd, data, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data, off = data[n:], off+int64(n)
	}
	return nil
}

// lockRange takes (typ F_RDLCK or F_WRLCK) or drops (F_UNLCK) an OFD lock on
// the whole file. OFD locks belong to the open file description, so they
// exclude each other across descriptions even within one process, and on
// Linux they do not interact with the role's flock. Taking a lock retries
// for up to rangeLockWait rather than blocking: a reader or writer is
// inside for microseconds, and one that was stopped mid-read must not be
// able to wedge the holder.
func lockRange(fd int, typ int16, path string) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0}
	if typ == unix.F_UNLCK {
		return unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
	}
	deadline := time.Now().Add(rangeLockWait)
	pause := 50 * time.Microsecond
	for {
		err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
		if err == nil {
			return nil
		}
		if err != unix.EAGAIN && err != unix.EACCES && err != unix.EINTR {
			return &os.PathError{Op: "lock", Path: path, Err: err}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("resident: %s stayed locked by a reader or writer for %v", path, rangeLockWait)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

const rangeLockWait = 2 * time.Second

func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// sameFile reports whether path still names the inode open as fd.
func sameFile(fd int, path string) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	err := unix.Lstat(path, &b)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// alive reports whether pid may be alive on this host. A pid on another
// host, or one we may not signal, counts as alive: never judge a holder dead
// without proof.
func alive(pid int, host string) bool {
	if pid <= 0 || host != hostname() {
		return true
	}
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// hostname is this host's name, read once.
var hostname = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
})

// checkDir refuses a store directory that users other than its owner and
// the caller can write (group or other, without the sticky bit), as for
// keys (R4, S9): they could swap the lock file under the holder. A sticky
// directory is fine: there only a file's owner may replace it, and the
// role's files must be ours.
func checkDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil // a missing directory: the lock file's open says so
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return fmt.Errorf("%w: the store directory %s is writable by group or others (mode %#o), who could replace the role's lock file; fix: chmod go-w %s, or make it sticky", store.ErrUnsafe, dir, st.Mode&0o7777, dir)
	}
	return nil
}
