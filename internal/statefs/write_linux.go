package statefs

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the names of WriteAtomic's temporary files; readers
// skip such names and the file backend's Prune removes the strays of
// crashed writers.
const TempPrefix = ".tmp-"

// BeforeRename, when set, runs in WriteAtomic between the temporary
// file's write and its rename. Nothing in the product sets it; the file
// backend's crash test sets it in a helper process to kill a real writer
// at that very point.
var BeforeRename func()

// WriteOpts says what WriteAtomic does besides replacing the file.
type WriteOpts struct {
	// Durable makes the write survive a crash: the file's data is fsynced
	// before the rename and the directory after it. Without it a file
	// system may leave a replaced file empty after a power cut (ext4's
	// auto_da_alloc flushes a file renamed over an existing name; others
	// need not). The callers say which writes need it.
	Durable bool
	// DataOnly, with Durable, fsyncs the file before the rename but not
	// the directory after it: a crash may then lose the rename (the name
	// keeps the file it named before, or none), never leave the name on a
	// file whose data is not on disk. For files whose loss in a crash
	// costs nothing but whose emptiness would read as corrupt.
	DataOnly bool
	// Locked takes flock(LOCK_EX) on the file before it becomes visible and
	// returns its descriptor still open and locked.
	Locked bool
	// NoReplace fails with EEXIST instead of replacing an existing name.
	NoReplace bool
}

// WriteAtomic replaces name in d with data: a temporary file in d (with
// d's file mode, set explicitly in a group store), write, rename over name,
// and with o.Durable an fsync of the file before and of d after. On any
// failure it removes the temporary file and returns an error naming the
// path and the cause; name is then unchanged. It is the one way fencerun
// replaces a state file. With o.Locked it returns the file's descriptor,
// locked; otherwise -1.
func (d Dir) WriteAtomic(name string, data []byte, o WriteOpts) (fd int, err error) {
	path := d.Join(name)
	var tmp string
	for range 10 {
		tmp = TempName()
		fd, err = unix.Openat(d.FD, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, d.FileMode())
		if err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		return -1, fmt.Errorf("write %s: create temporary file: %w", path, err)
	}
	fail := func(step string, err error) (int, error) {
		unix.Close(fd)
		unix.Unlinkat(d.FD, tmp, 0)
		return -1, fmt.Errorf("write %s: %s: %w", path, step, err)
	}
	if d.Shared {
		if err := unix.Fchmod(fd, d.FileMode()); err != nil {
			return fail("chmod", err)
		}
	}
	if o.Locked {
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
	if o.Durable {
		if err := unix.Fsync(fd); err != nil {
			return fail("fsync", err)
		}
	}
	if BeforeRename != nil {
		BeforeRename()
	}
	var flags uint
	if o.NoReplace {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(d.FD, tmp, d.FD, name, flags); err != nil {
		return fail("rename", err)
	}
	if o.Durable && !o.DataOnly {
		if err := unix.Fsync(d.FD); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("write %s: fsync directory: %w", path, err)
		}
	}
	if o.Locked {
		return fd, nil
	}
	unix.Close(fd)
	return -1, nil
}

// TempName is a fresh name for a temporary file: TempPrefix and 16 hex
// digits.
func TempName() string {
	var b [8]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return TempPrefix + hex.EncodeToString(b[:])
}

// LockFile opens name in d (creating it with create) and takes flock(how)
// on it. If the lock is busy it waits until it is free or ctx ends; a wait
// abandoned by ctx leaves the descriptor to a goroutine that closes it once
// the kernel call returns. The lock is released by closing the descriptor,
// which is the only one on its open file description.
func (d Dir) LockFile(ctx context.Context, name string, create bool, how int) (int, error) {
	return d.LockFileSlow(ctx, name, create, how, 0, nil)
}

// LockFileSlow is LockFile that, if the lock is still busy after the
// given time, calls slow once with the open descriptor (say, to log who
// holds the lock: FlockHolder) and goes on waiting; a nil slow is never
// called.
func (d Dir) LockFileSlow(ctx context.Context, name string, create bool, how int, after time.Duration, slow func(fd int)) (int, error) {
	flags := unix.O_RDONLY
	if create {
		flags |= unix.O_CREAT
	}
	fd, err := d.OpenFile(name, flags)
	if err != nil {
		return -1, err
	}
	err = unix.Flock(fd, how|unix.LOCK_NB)
	if err == nil {
		return fd, nil
	}
	if err != unix.EWOULDBLOCK {
		unix.Close(fd)
		return -1, fmt.Errorf("lock %s: %w", d.Join(name), err)
	}
	done := make(chan error, 1)
	go func() { done <- FlockWait(fd, how) }()
	var late <-chan time.Time
	if slow != nil {
		t := time.NewTimer(after)
		defer t.Stop()
		late = t.C
	}
	for {
		select {
		case <-late:
			late = nil
			slow(fd)
			continue
		case err := <-done:
			if err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("lock %s: %w", d.Join(name), err)
			}
			return fd, nil
		case <-ctx.Done():
			go func() {
				<-done
				unix.Close(fd)
			}()
			return -1, fmt.Errorf("lock %s: %w", d.Join(name), context.Cause(ctx))
		}
	}
}

// FlockWait takes flock(how) on fd, blocking, across EINTR.
func FlockWait(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// ProbeLock reports whether someone holds flock(LOCK_EX) on name in d
// (ProbeFD). A missing file is not held.
func (d Dir) ProbeLock(name string) (bool, error) {
	fd, err := d.OpenFile(name, unix.O_RDONLY)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer unix.Close(fd)
	return ProbeFD(fd, d.Join(name))
}

// ProbeFD reports whether someone holds flock(LOCK_EX) on the file open as
// fd. It tries LOCK_SH without blocking, so two probes never see each
// other, and drops a lock it won at once, before the caller's close (so
// that a close event someone waits on comes after the unlock). A prober's
// brief LOCK_SH makes an exclusive LOCK_NB attempt fail meanwhile: callers
// that mind exclude it with a lock of their own (the file backend's guard).
func ProbeFD(fd int, path string) (bool, error) {
	for {
		switch err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err {
		case nil:
			unix.Flock(fd, unix.LOCK_UN)
			return false, nil
		case unix.EWOULDBLOCK:
			return true, nil
		case unix.EINTR:
		default:
			return false, fmt.Errorf("lock %s: %w", path, err)
		}
	}
}
