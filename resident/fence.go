package resident

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// fenceRecord is the content of the fence file: the last token handed out.
type fenceRecord struct {
	Schema int    `json:"schema"`
	Fence  uint64 `json:"fence"`
}

// readFence returns the last token recorded at path, 0 when there is no
// file yet. A file that cannot be parsed fails closed (S6): store.ErrCorrupt
// naming it.
func readFence(path string) (uint64, error) {
	fd, err := openState(path, unix.O_RDONLY, false)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	data, err := readAll(fd, path)
	if err != nil {
		return 0, err
	}
	var r fenceRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, path, err)
	}
	if r.Schema != schema {
		return 0, fmt.Errorf("%w: %s: unknown schema %d", store.ErrCorrupt, path, r.Schema)
	}
	return r.Fence, nil
}

// nextFence records and returns the token after both the fence file's and
// stale's (a dead holder's payload). Call it holding the role's flock. The
// record is durable before the token is returned, so no token is handed out
// twice, across a crash or a reboot (S4).
func nextFence(path string, stale uint64) (uint64, error) {
	last, err := readFence(path)
	if err != nil {
		return 0, err
	}
	next := max(last, stale) + 1
	data, _ := json.Marshal(fenceRecord{Schema: schema, Fence: next})
	if err := writeAtomic(path, append(data, '\n')); err != nil {
		return 0, fmt.Errorf("resident: record fence: %w", err)
	}
	return next, nil
}
