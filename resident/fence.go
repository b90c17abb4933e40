package resident

import (
	"fmt"

	"github.com/fencerun/fencerun/internal/fences"
)

// The role's fencing tokens (S4) come from the one fence allocator of
// fencerun's state, internal/fences, as the file backend's do: a durable
// reservation in <store>.resident.fence, a block of fences at a time, and
// the exact counter of this boot in <store>.resident.fence-next. An
// earlier fencerun's fence file there ({"schema":1,"fence":N}, the last
// token it handed out) is read as a reservation of N, so no token at or
// below N is handed out again; the next reservation replaces it.

// nextFence records and returns the token after both every token handed
// out before and stale (a dead holder's payload). Call it holding the
// role's flock. The reservation covering it is durable before it is
// returned, so no token is handed out twice, across a crash or a reboot.
func nextFence(p paths, stale uint64) (uint64, error) {
	d, name, err := openIn(p.fence, false)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	fence, err := fences.Counter{Dir: d, Reservation: name, Lock: name + "-next"}.Take(stale + 1)
	if err != nil {
		return 0, fmt.Errorf("resident: %w", err)
	}
	return fence, nil
}
