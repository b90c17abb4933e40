package resident

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// Status reads the resident role of the store at storePath without writing
// anything. It never trusts the payload alone (R2): it first probes the
// kernel lock without blocking, and a payload on an unlocked file is stale.
//
// State is store.Held (Holder set; Holder nil when the lock is taken but no
// holder is recorded yet: being taken, or flock(1) run on the file by hand),
// store.Stuck (ticked, then silent for the holder's stuck_after), store.Free,
// or store.Corrupt with Err naming the file (a held role whose payload
// cannot be read, a directory or symlink in place of the lock file). The
// error is for failing to look at all (permissions, I/O).
//
// It is a snapshot: the role may change as soon as it returns. Its probe
// holds a shared lock for an instant; an Acquire that meets it sees a held
// file with a stale payload and retries (settle), unless the stale
// payload's pid has since been reused by a live process, when it reports
// that pid as the holder: contention, never a second holder.
func Status(storePath string) (*store.Status, error) {
	p, err := pathsOf(storePath)
	if err != nil {
		return nil, err
	}
	st := &store.Status{Store: p.store, State: store.Free, Waiters: []store.Holder{}}
	fd, err := openFile(p.lock, unix.O_RDONLY, true)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, nil
	case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrUnsafe):
		st.State, st.Err = store.Corrupt, err
		return st, nil
	case err != nil:
		return nil, fmt.Errorf("resident: status: %w", err)
	}
	defer unix.Close(fd)

	for probes := 0; ; probes++ {
		held, err := statefs.ProbeFD(fd, p.lock)
		if err != nil {
			return nil, fmt.Errorf("resident: status: %w", err)
		}
		if !held {
			// A dead holder's payload: what its tree may have left. What
			// cannot be read fails closed (S6): it may have named some.
			pl, empty, err := readPayload(fd, p.lock)
			switch {
			case errors.Is(err, store.ErrCorrupt):
				st.State, st.Err = store.Corrupt, err
			case err == nil && !empty:
				st.Leftovers = pl.trees()
			}
			return st, nil
		}
		pl, empty, err := readPayload(fd, p.lock)
		switch {
		case errors.Is(err, store.ErrCorrupt) && !empty:
			st.State, st.Err = store.Corrupt, err
			return st, nil
		case err != nil && !empty:
			return nil, fmt.Errorf("resident: status: %w", err)
		case empty && probes == 0:
			continue // released since the probe? probe once more
		case empty:
			st.State = store.Held
			return st, nil
		}
		st.State, st.Holder = store.Held, pl.holder()
		st.Waiters = append(st.Waiters, standbys(p)...)
		st.Holder.Marker = ""
		if pl.stuck(time.Now()) {
			st.State = store.Stuck
		}
		return st, nil
	}
}
