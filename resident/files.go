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

	"github.com/fencerun/fencerun/internal/statefs"
	"golang.org/x/sys/unix"
)

// paths are the files of one store's role. For a store /d/app.db, beside
// it in /d:
//
//	app.db.resident.lock       the role: flock(LOCK_EX) held by the holder for
//	                           as long as it lives; its content is the payload
//	app.db.resident.fence      the durable fence reservation (fence.go)
//	app.db.resident.fence-next this boot's fence counter, and the fence lock
//	app.db.resident.handover   a newcomer's handover request (at most one)
//	app.db.resident.cancel     a cancel request: the holder's fence
//	app.db.resident.wait-*     a standby, locked by it while it waits
//	app.db.resident.n-*        a process's change socket (notify_linux.go)
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

// openIn opens the directory of path, the role's directory beside its
// store, with the Beside policy of internal/statefs (not writable by group
// or others unless sticky; every file in it ours), or with look, only to
// read (status), and returns it with path's name in it. Every file of the
// role is reached through such a directory: never through a symlink
// (store.ErrUnsafe), a directory, FIFO or other non-regular file in a
// file's place is store.ErrCorrupt, and errors name the file.
func openIn(path string, look bool) (statefs.Dir, string, error) {
	d, err := statefs.OpenBeside(filepath.Dir(path), look)
	if err != nil {
		return d, "", fmt.Errorf("%s: %w", path, err)
	}
	return d, filepath.Base(path), nil
}

// openFile opens one of the role's files (openIn). A missing file is an
// error that is os.ErrNotExist.
func openFile(path string, flags int, look bool) (int, error) {
	d, name, err := openIn(path, look)
	if err != nil {
		return -1, err
	}
	defer d.Close()
	return d.OpenFile(name, flags)
}

// openLock opens the role's lock file for reading and writing. A missing
// one is made first, whole, as a released role's (WriteAtomic, never
// replacing one made meanwhile), so that no lock file fencerun makes is
// ever empty: an empty one is corrupt (decodePayload).
func openLock(path string) (int, error) {
	d, name, err := openIn(path, false)
	if err != nil {
		return -1, err
	}
	defer d.Close()
	fd, err := d.OpenFile(name, unix.O_RDWR)
	if !errors.Is(err, os.ErrNotExist) {
		return fd, err
	}
	released, err := statefs.WholeSlots(nil, 2)
	if err != nil {
		return -1, err
	}
	_, err = d.WriteAtomic(name, released, statefs.WriteOpts{Durable: true, NoReplace: true})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	return d.OpenFile(name, unix.O_RDWR)
}

// writeFile replaces one of the role's files with data, durably
// (statefs.WriteAtomic): no half-written file, ever (B5).
func writeFile(path string, data []byte) error {
	d, name, err := openIn(path, false)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = d.WriteAtomic(name, data, statefs.WriteOpts{Durable: true})
	return err
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
