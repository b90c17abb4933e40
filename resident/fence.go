package resident

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// The role's fencing tokens (S4) come from the one fence allocator of
// fencerun's state, internal/statefs, as the file backend's do: a durable
// reservation in <store>.resident.fence, a block of fences at a time, and
// the exact counter of this boot in <store>.resident.fence-next. An
// earlier fencerun's fence file there ({"schema":1,"fence":N}, the last
// token it handed out) is read as a reservation of N, so no token at or
// below N is handed out again; the next reservation replaces it. (An
// earlier fencerun meeting the new file fails closed on it as corrupt
// rather than reuse a token.) Deleting the fence files by hand restarts
// tokens above a stale payload's (or at 1), as deleting any state would.

// nextFence records and returns the token after both every token handed
// out before and stale (a dead holder's payload). Call it holding the
// role's flock. The reservation covering it is durable before it is
// returned, so no token is handed out twice, across a crash or a reboot.
// sawLive says a holder whose files were removed was seen alive (its
// claim): a counter removed with them restarts above it (RestartFloor).
func nextFence(p paths, stale uint64, sawLive bool) (uint64, error) {
	d, name, err := openIn(p.fence, false)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	c := counterIn(d, name)
	atLeast := stale + 1
	if sawLive {
		atLeast = max(atLeast, c.RestartFloor(time.Now()))
	}
	fence, err := c.Take(atLeast)
	if errors.Is(err, store.ErrCorrupt) {
		return 0, fmt.Errorf("resident: %w (release --resident %s --force clears it)", err, p.store)
	}
	if err != nil {
		return 0, fmt.Errorf("resident: %w", err)
	}
	return fence, nil
}

// counterIn is the role's fence counter: the fence file name in d, the
// role's directory, and its counter beside it.
func counterIn(d statefs.Dir, name string) statefs.Counter {
	return statefs.Counter{Dir: d, Reservation: name, Lock: name + "-next"}
}

// repairFences restarts the role's fence reservation when it cannot be
// read, or clears what stands in the counter's place, as release --force
// does for the file backend's (statefs.Counter.Repair): the next fence is
// above the larger of floorHint (a dead holder's payload's) and every
// fence handed out before. It creates nothing where there is nothing to
// repair, and returns nil then. Looking first, it reads another user's
// files too; it repairs only with the role's own access (openIn), so that
// another user's fence files are refused, not replaced.
func repairFences(p paths, floorHint uint64) (*statefs.Repaired, error) {
	d, name, err := openIn(p.fence, true)
	if err != nil {
		return nil, nil // no directory: nothing there to repair
	}
	problem := counterIn(d, name).Problem()
	d.Close()
	if problem == nil || !errors.Is(problem, store.ErrCorrupt) {
		return nil, nil // readable, or unsafe (a symlink): Take names it
	}
	d, name, err = openIn(p.fence, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return counterIn(d, name).Repair(floorHint, time.Now())
}
