package resident

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/notify"
	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/unixsock"
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
	Notify string    `json:"notify,omitempty"` // its socket, woken at a release
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
	d, _, err := openIn(p.lock, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	removeDeadStandbys(d, p)
	s.Schema = schema
	data, _ := json.Marshal(s)
	name := standbyPrefix(p) + randomID()
	fd, err := d.WriteAtomic(name, append(data, '\n'), statefs.WriteOpts{Locked: true, NoReplace: true})
	if err != nil {
		return nil, err
	}
	return &standbyFile{path: d.Join(name), fd: fd}, nil
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
	d, _, err := openIn(p.lock, true)
	if err != nil {
		return nil
	}
	defer d.Close()
	eachStandby(d, p, func(path string, s *standby, alive bool) {
		if alive {
			out = append(out, store.Holder{Name: s.Name, PID: s.PID, Host: s.Host, Reason: s.Reason, Acquired: s.Since})
		}
	})
	slices.SortFunc(out, func(a, b store.Holder) int { return a.Acquired.Compare(b.Acquired) })
	return out
}

// wakeStandbys tells every live standby of the role that it was released.
func wakeStandbys(p paths, log hclog.Logger) {
	d, _, err := openIn(p.lock, true)
	if err != nil {
		return
	}
	defer d.Close()
	eachStandby(d, p, func(_ string, s *standby, alive bool) {
		if !alive || s.Notify == "" {
			return
		}
		if err := notify.Send(d.FD, d.Path, notifyPrefix(p), s.Notify); err != nil {
			log.Debug("could not wake a standby", "pid", s.PID, "error", err)
		}
	})
}

func removeDeadStandbys(d statefs.Dir, p paths) {
	eachStandby(d, p, func(path string, s *standby, alive bool) {
		if !alive {
			unix.Unlink(path)
			if notify.IsName(s.Notify, notifyPrefix(p)) {
				unixsock.Remove(d.FD, s.Notify) // its socket, left by its death
			}
		}
	})
}

// eachStandby calls fn with every standby file of the role in d, its
// content, and whether its standby lives (its lock is held). Unreadable
// files are skipped, dead ones given with what could be read; another
// user's are read too.
func eachStandby(d statefs.Dir, p paths, fn func(path string, s *standby, alive bool)) {
	names, err := d.List()
	if err != nil {
		return
	}
	d.Look = true
	prefix := standbyPrefix(p)
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		fd, err := d.OpenFile(name, unix.O_RDONLY)
		if err != nil {
			continue
		}
		path := d.Join(name)
		held, err := statefs.ProbeFD(fd, path)
		data, rerr := statefs.ReadFD(fd, path)
		unix.Close(fd)
		var s standby
		if err == nil && !held {
			_ = json.Unmarshal(data, &s)
			fn(path, &s, false)
			continue
		}
		if err != nil || rerr != nil || json.Unmarshal(data, &s) != nil || s.PID <= 0 {
			continue
		}
		fn(path, &s, true)
	}
}
