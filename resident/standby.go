package resident

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// Standbys (R8) show as waiters in Status: a standby keeps a file
// <store>.resident.wait-<random> beside the lock, holding flock(LOCK_EX)
// on it for as long as it waits, with who it is in it. A file whose lock
// is free is a dead standby's: Status skips it, and the next standby
// removes it. The file is locked before it is renamed into place, so it is
// never seen unlocked while its standby lives.

// standby is the content of a standby's file.
type standby struct {
	Schema int       `json:"schema"`
	PID    int       `json:"pid"`
	Host   string    `json:"host"`
	Name   string    `json:"name"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// standbyFile is a standby's own file, open and locked.
type standbyFile struct {
	path string
	fd   int
}

func standbyPrefix(p paths) string { return filepath.Base(p.store) + ".resident.wait-" }

// register announces a standby; failing to is only logged by the caller:
// it changes what status shows, not the role.
func register(p paths, s standby) (*standbyFile, error) {
	removeDeadStandbys(p)
	s.Schema = schema
	data, _ := json.Marshal(s)
	tmp := filepath.Join(p.dir, "."+standbyPrefix(p)+randomID())
	fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|openFlags, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	fail := func(op string, err error) (*standbyFile, error) {
		unix.Close(fd)
		unix.Unlink(tmp)
		return nil, &os.PathError{Op: op, Path: tmp, Err: err}
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail("lock", err)
	}
	if err := writeFull(fd, append(data, '\n'), 0); err != nil {
		return fail("write", err)
	}
	path := filepath.Join(p.dir, standbyPrefix(p)+randomID())
	if err := unix.Rename(tmp, path); err != nil {
		return fail("rename", err)
	}
	return &standbyFile{path: path, fd: fd}, nil
}

// remove unlinks the file, then drops its lock.
func (f *standbyFile) remove() {
	if f == nil {
		return
	}
	unix.Unlink(f.path)
	unix.Close(f.fd)
}

// standbys lists the live standbys of the role, oldest first.
func standbys(p paths) []store.Holder {
	var out []store.Holder
	eachStandby(p, func(path string, s *standby) {
		if s != nil {
			out = append(out, store.Holder{Name: s.Name, PID: s.PID, Host: s.Host, Reason: s.Reason, Acquired: s.Since})
		}
	})
	slices.SortFunc(out, func(a, b store.Holder) int { return a.Acquired.Compare(b.Acquired) })
	return out
}

func removeDeadStandbys(p paths) {
	eachStandby(p, func(path string, s *standby) {
		if s == nil {
			unix.Unlink(path)
		}
	})
}

// eachStandby calls fn with every standby file of the role: with its
// content when its standby lives, nil when its lock is free (dead).
// Unreadable files are skipped.
func eachStandby(p paths, fn func(path string, s *standby)) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return
	}
	prefix := standbyPrefix(p)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(p.dir, e.Name())
		fd, err := unix.Open(path, unix.O_RDONLY|openFlags, 0)
		if err != nil {
			continue
		}
		held, err := probe(fd, path)
		if err == nil && !held {
			unix.Close(fd)
			fn(path, nil)
			continue
		}
		data, rerr := readAll(fd, path)
		unix.Close(fd)
		var s standby
		if err != nil || rerr != nil || json.Unmarshal(data, &s) != nil || s.PID <= 0 {
			continue
		}
		fn(path, &s)
	}
}
