package resident

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// Revoke breaks the holder's role (release --resident PATH --force): it
// deletes the lock file the holder locked and tells the holder's socket,
// so the holder loses the role at once (its Renew and Check say
// store.ErrLost: exit 76), and
// its claim keeps every newcomer from starting until its tree is gone
// (moved_linux.go). It also clears what fails closed: a corrupt payload of
// a role nobody holds, junk (a directory, a FIFO) where the lock file
// belongs, and a fence reservation that cannot be read or junk where its
// counter belongs (restarted above every fence handed out before, as the
// file backend's release --force does; repairFences). A symlink in any of
// their places stays refused as unsafe. It reports whether there was a
// holder or an unreadable lock file, and what it repaired of the fences
// (nil: nothing); a free role is left as it is, with whatever leftovers
// its stale payload records for the next holder.
func Revoke(storePath string) (bool, *statefs.Repaired, error) {
	p, err := pathsOf(storePath)
	if err != nil {
		return false, nil, err
	}
	had, hint, err := revokeLock(p)
	if err != nil {
		return had, nil, err
	}
	// A fence beyond what the allocator hands out is no dead holder's.
	if hint > statefs.FenceMax-2*statefs.FenceBlock {
		hint = 0
	}
	repaired, err := repairFences(p, hint)
	if err != nil {
		return had, nil, fmt.Errorf("resident: release: %w", err)
	}
	return had, repaired, nil
}

// revokeLock is Revoke's part on the lock file; it also returns the
// largest fence still readable in it, for repairFences.
func revokeLock(p paths) (bool, uint64, error) {
	fd, err := openFile(p.lock, unix.O_RDONLY, true)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, 0, nil
	case errors.Is(err, store.ErrCorrupt):
		return true, 0, clearJunk(p.lock)
	case err != nil:
		return false, 0, fmt.Errorf("resident: release: %w", err)
	}
	defer unix.Close(fd)
	raw, _ := statefs.ReadFD(fd, p.lock)
	hint := statefs.Salvage(raw, "fence")
	held, err := statefs.ProbeFD(fd, p.lock)
	if err != nil {
		return false, hint, fmt.Errorf("resident: release: %w", err)
	}
	if !held {
		if _, _, err := readPayload(fd, p.lock); errors.Is(err, store.ErrCorrupt) {
			return true, hint, removeIfSame(fd, p.lock)
		}
		return false, hint, nil
	}
	pl, _, _ := readPayload(fd, p.lock)
	if err := removeIfSame(fd, p.lock); err != nil {
		return true, hint, err
	}
	poke(p, pl.Notify, nil) // the holder checks its path at once, not within a second
	return true, hint, nil
}

// removeIfSame deletes path if it still names the file open as fd.
func removeIfSame(fd int, path string) error {
	same, err := sameFile(fd, path)
	if err != nil || !same {
		return err
	}
	if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
		return fmt.Errorf("resident: release: %w", &os.PathError{Op: "remove", Path: path, Err: err})
	}
	return nil
}

// clearJunk removes a directory (empty), FIFO or other non-regular file
// standing where the lock file belongs; a symlink there stays refused.
func clearJunk(path string) error {
	d, name, err := openIn(path, true)
	if err != nil {
		return fmt.Errorf("resident: release: %w", err)
	}
	defer d.Close()
	if err := d.ClearJunk(name); err != nil && !errors.Is(err, statefs.ErrNoJunk) {
		return fmt.Errorf("resident: release: %w", err)
	}
	return nil
}

// Cancel asks the holder of the role to stop its command gracefully
// (cancel --resident PATH): it writes the holder's fence to the cancel
// file beside the lock and tells the holder's socket, so it sees it at once; the holder
// exits 77. It reports whether there was a holder to ask.
func Cancel(storePath string) (bool, error) {
	st, err := Status(storePath)
	if err != nil {
		return false, err
	}
	if st.State == store.Corrupt {
		return false, st.Err
	}
	if st.Holder == nil || st.Holder.Fence == 0 {
		return false, nil
	}
	p, _ := pathsOf(storePath)
	if err := writeFile(p.cancel, []byte(strconv.FormatUint(st.Holder.Fence, 10)+"\n")); err != nil {
		return false, fmt.Errorf("resident: cancel: %w", err)
	}
	poke(p, holderSocket(p), nil)
	return true, nil
}

// holderSocket is the socket the payload names, "" if none can be read.
func holderSocket(p paths) string {
	fd, err := openFile(p.lock, unix.O_RDONLY, true)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	pl, _, err := readPayload(fd, p.lock)
	if err != nil {
		return ""
	}
	return pl.Notify
}

// cancelled reports whether the cancel file asks the holder with fence to
// stop.
func cancelled(p paths, fence uint64) bool {
	fd, err := openFile(p.cancel, unix.O_RDONLY, false)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	data, err := statefs.ReadFD(fd, p.cancel)
	if err != nil {
		return false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return err == nil && n == fence
}
