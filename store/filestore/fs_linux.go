package filestore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// dir is an open directory of the state tree and its path, for messages.
// Everything below the root is reached relative to such a descriptor, with
// O_NOFOLLOW, so a symlink planted anywhere in the tree is refused instead
// of followed.
type dir struct {
	fd     int
	path   string
	access // whose store it is, inherited by everything below
}

func (d dir) join(name string) string { return d.path + "/" + name }

func (d dir) close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
	}
}

// fileMode is the mode of state files: set explicitly, never left to the
// umask.
const fileMode = 0o600

// maxFileSize bounds what is read from a state file: records and queue
// entries are a few hundred bytes; anything much larger is not one.
const maxFileSize = 64 << 10

// tempPrefix starts the names of the atomic write's temporary files; readers
// skip such names and Prune removes the strays of crashed writers.
const tempPrefix = ".tmp-"

// beforeRename, when set, runs in writeAtomic between the temporary file's
// write and its rename. Nothing in the product sets it; a test's helper
// process sets it to crash a real writer at that very point.
var beforeRename func()

// openDir opens (and with create, first makes) the directory name in
// parent. It refuses a symlink (ErrUnsafe), a non-directory (ErrCorrupt) and
// a directory that is not the store's, or that others may write
// (ErrUnsafe; access_linux.go). A directory it creates gets the store's
// mode explicitly. A missing directory gives an error that is
// fs.ErrNotExist.
func openDir(parent dir, name string, create bool) (dir, error) {
	path := parent.join(name)
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent.fd, name, flags, 0)
	if err == unix.ENOENT && create {
		if err := makeDir(parent, name); err != nil {
			return dir{fd: -1}, err
		}
		fd, err = unix.Openat(parent.fd, name, flags, 0)
	}
	if err != nil {
		return dir{fd: -1}, openError(parent, name, err)
	}
	d := dir{fd: fd, path: path, access: parent.access}
	if err := checkOwned(d); err != nil {
		d.close()
		return dir{fd: -1}, err
	}
	return d, nil
}

// makeDir creates the directory name in parent with the store's mode. In
// a group store the umask may take group bits, so the directory is made
// under a temporary name, given its mode explicitly, and only then renamed
// into place: the other members never see it with the wrong mode. (Its
// group comes from the parent's setgid bit.)
func makeDir(parent dir, name string) error {
	path := parent.join(name)
	if !parent.shared {
		if err := unix.Mkdirat(parent.fd, name, parent.dirMode()); err != nil && err != unix.EEXIST {
			return fmt.Errorf("filestore: create %s: %w", path, err)
		}
		return nil
	}
	tmp := tempName()
	if err := unix.Mkdirat(parent.fd, tmp, 0o700); err != nil {
		return fmt.Errorf("filestore: create %s: %w", path, err)
	}
	if err := unix.Fchmodat(parent.fd, tmp, parent.dirMode(), 0); err != nil {
		unix.Unlinkat(parent.fd, tmp, unix.AT_REMOVEDIR)
		return fmt.Errorf("filestore: chmod %s: %w", path, err)
	}
	err := unix.Renameat2(parent.fd, tmp, parent.fd, name, unix.RENAME_NOREPLACE)
	if err != nil {
		unix.Unlinkat(parent.fd, tmp, unix.AT_REMOVEDIR)
		if err != unix.EEXIST {
			return fmt.Errorf("filestore: create %s: %w", path, err)
		}
	}
	return nil
}

// checkOwned refuses a directory that is not the store's, or that others
// can write: files in it could be planted or swapped under us (S9).
func checkOwned(d dir) error {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return fmt.Errorf("filestore: stat %s: %w", d.path, err)
	}
	return d.check(st, d.path)
}

// openFile opens the regular file name in d. It refuses a symlink
// (ErrUnsafe) and anything but a regular file (ErrCorrupt); O_NONBLOCK keeps
// a planted FIFO from blocking the open. A missing file gives an error that
// is fs.ErrNotExist.
func openFile(d dir, name string, flags int) (int, error) {
	if flags&unix.O_CREAT != 0 && d.shared {
		// A lock file the other members must open: never visible with a
		// mode the umask took bits from.
		fd, err := openRaw(d, name, flags&^unix.O_CREAT)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			if err == nil {
				if _, err := checkRegular(fd, d.join(name)); err != nil {
					unix.Close(fd)
					return -1, err
				}
			}
			return fd, err
		}
		if _, err := writeAtomic(d, name, nil, writeOpts{noReplace: true}); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
	}
	fd, err := openRaw(d, name, flags)
	if err != nil {
		return -1, err
	}
	if _, err := checkRegular(fd, d.join(name)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openRaw is openFile without the check that the file is a regular one,
// for callers that stat it anyway.
func openRaw(d dir, name string, flags int) (int, error) {
	fd, err := unix.Openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, d.fileMode())
	if err != nil {
		return -1, openError(d, name, err)
	}
	return fd, nil
}

func checkRegular(fd int, path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("filestore: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("%w: %s is %s, not a regular file", store.ErrCorrupt, path, fileKind(st.Mode))
	}
	return st, nil
}

// openError says why opening name in d failed, in the terms of package
// store: a symlink is unsafe, a file of the wrong kind is corrupt.
func openError(d dir, name string, err error) error {
	path := d.join(name)
	switch err {
	case unix.ELOOP:
		return fmt.Errorf("%w: %s is a symlink; refusing to follow it", store.ErrUnsafe, path)
	case unix.EISDIR:
		return fmt.Errorf("%w: %s is a directory, not a regular file", store.ErrCorrupt, path)
	case unix.ENOTDIR:
		// O_DIRECTORY|O_NOFOLLOW reports a symlink as ENOTDIR.
		var st unix.Stat_t
		if unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return fmt.Errorf("%w: %s is a symlink; refusing to follow it", store.ErrUnsafe, path)
			}
			return fmt.Errorf("%w: %s is %s, not a directory", store.ErrCorrupt, path, fileKind(st.Mode))
		}
	}
	return fmt.Errorf("filestore: open %s: %w", path, err)
}

func fileKind(mode uint32) string {
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

// readFile reads the regular file name in d whole.
func readFile(d dir, name string) ([]byte, error) {
	fd, err := openRaw(d, name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	st, err := checkRegular(fd, d.join(name))
	if err != nil {
		return nil, err
	}
	return readSized(fd, d.join(name), st.Size)
}

// readSized reads a state file of size bytes whole. One read of the size
// plus a byte (to see the end) usually does.
func readSized(fd int, path string, size int64) ([]byte, error) {
	if size > maxFileSize {
		return nil, fmt.Errorf("%w: %s is over %d bytes", store.ErrCorrupt, path, maxFileSize)
	}
	buf := make([]byte, 0, size+1)
	for {
		if len(buf) == cap(buf) {
			if len(buf) > maxFileSize {
				return nil, fmt.Errorf("%w: %s is over %d bytes", store.ErrCorrupt, path, maxFileSize)
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("filestore: read %s: %w", path, err)
		}
		buf = buf[:len(buf)+n]
		if n == 0 || len(buf) < cap(buf) {
			return buf, nil
		}
	}
}

// writeOpts says what writeAtomic does besides replacing the file.
type writeOpts struct {
	// durable makes the write survive a crash: the file's data is fsynced
	// before the rename and the directory after it. Only a new fence needs
	// it (S4). Every other write (renewal, tick, release, revocation,
	// cancel, queue entry) may be lost in a crash at no cost to safety:
	// after the reboot its writer is dead, and a dead holder's or waiter's
	// state is taken over at once whatever it says. Skipping their fsyncs
	// is most of the CPU of holding a lease (P4) and of a release (P1, P2).
	// Without the fsync a file system may leave a replaced file empty after
	// a power cut. ext4 (auto_da_alloc, the default) flushes a file's data
	// when it is renamed over an existing name, so there the name holds the
	// old record or the new one; elsewhere an empty record reads as corrupt
	// and fails closed (S6) until release --force, which restores fences
	// above every earlier one.
	durable bool
	// locked takes flock(LOCK_EX) on the file before it becomes visible and
	// returns its descriptor still open and locked (queue entries).
	locked bool
	// noReplace fails with EEXIST instead of replacing an existing name.
	noReplace bool
}

// writeAtomic replaces name in d with data: a temporary file in d (0600),
// write, rename over name, and with o.durable an fsync of the file before and of d after. On any
// failure it removes the temporary file and returns an error naming the
// path and the cause; name is then unchanged. It is the one way this
// package writes a file.
func writeAtomic(d dir, name string, data []byte, o writeOpts) (fd int, err error) {
	path := d.join(name)
	var tmp string
	for range 10 {
		tmp = tempName()
		fd, err = unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, d.fileMode())
		if err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		return -1, fmt.Errorf("filestore: write %s: create temporary file: %w", path, err)
	}
	fail := func(step string, err error) (int, error) {
		unix.Close(fd)
		unix.Unlinkat(d.fd, tmp, 0)
		return -1, fmt.Errorf("filestore: write %s: %s: %w", path, step, err)
	}
	if d.shared {
		if err := unix.Fchmod(fd, d.fileMode()); err != nil {
			return fail("chmod", err)
		}
	}
	if o.locked {
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return fail("lock", err)
		}
	}
	for rest := data; len(rest) > 0; {
		n, err := unix.Write(fd, rest)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail("write", err)
		}
		rest = rest[n:]
	}
	if o.durable {
		if err := unix.Fsync(fd); err != nil {
			return fail("fsync", err)
		}
	}
	if beforeRename != nil {
		beforeRename()
	}
	var flags uint
	if o.noReplace {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(d.fd, tmp, d.fd, name, flags); err != nil {
		return fail("rename", err)
	}
	if o.durable {
		if err := unix.Fsync(d.fd); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("filestore: write %s: fsync directory: %w", path, err)
		}
	}
	if o.locked {
		return fd, nil
	}
	unix.Close(fd)
	return -1, nil
}

func tempName() string {
	var b [8]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return tempPrefix + hex.EncodeToString(b[:])
}

// lockFile opens name in d (creating it with create) and takes flock(how)
// on it. If the lock is busy it waits until it is free or ctx ends; a wait
// abandoned by ctx leaves the descriptor to a goroutine that closes it once
// the kernel call returns. The lock is released by closing the descriptor,
// which is the only one on its open file description.
func lockFile(ctx context.Context, d dir, name string, create bool, how int) (int, error) {
	flags := unix.O_RDONLY
	if create {
		flags |= unix.O_CREAT
	}
	fd, err := openFile(d, name, flags)
	if err != nil {
		return -1, err
	}
	err = unix.Flock(fd, how|unix.LOCK_NB)
	if err == nil {
		return fd, nil
	}
	if err != unix.EWOULDBLOCK {
		unix.Close(fd)
		return -1, fmt.Errorf("filestore: lock %s: %w", d.join(name), err)
	}
	done := make(chan error, 1)
	go func() { done <- flockWait(fd, how) }()
	select {
	case err := <-done:
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("filestore: lock %s: %w", d.join(name), err)
		}
		return fd, nil
	case <-ctx.Done():
		go func() {
			<-done
			unix.Close(fd)
		}()
		return -1, fmt.Errorf("filestore: lock %s: %w", d.join(name), context.Cause(ctx))
	}
}

func flockWait(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// probeLock reports whether someone holds flock(LOCK_EX) on name in d. It
// tries LOCK_SH without blocking, so two probes never see each other; a
// prober must still hold the key's guard shared, because its brief LOCK_SH
// makes an acquirer's LOCK_EX|LOCK_NB fail. A missing file is not held.
func probeLock(d dir, name string) (bool, error) {
	fd, err := openFile(d, name, unix.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	return probeFD(fd, d.join(name))
}

func probeFD(fd int, path string) (bool, error) {
	switch err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err {
	case nil:
		return false, nil
	case unix.EWOULDBLOCK:
		return true, nil
	default:
		return false, fmt.Errorf("filestore: lock %s: %w", path, err)
	}
}
