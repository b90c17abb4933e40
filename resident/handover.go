package resident

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hashicorp/go-hclog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// request is a newcomer's handover request, the content of
// <store>.resident.handover. It names the holder it is for by fence.
type request struct {
	Schema      int         `json:"schema"`
	ID          string      `json:"id"`
	PID         int         `json:"pid"`
	Host        string      `json:"host"`
	Surface     string      `json:"surface"`
	Build       store.Build `json:"build"`
	RequestedAt time.Time   `json:"requested_at"`
	Fence       uint64      `json:"fence"`
	Notify      string      `json:"notify,omitempty"` // the newcomer's socket, for the answer
}

// sendRequest puts r in place of any request pending, and tells the
// holder's socket (holder, from its payload): the holder judges the latest
// one (every newcomer still waiting judges the next holder afresh), so of
// two newcomers at once the newest build ends up holding the role, and an
// equal one is refused as not newer.
func sendRequest(p paths, r request, holder string, log hclog.Logger) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("resident: encode handover request: %w", err)
	}
	if err := writeFile(p.handover, append(data, '\n')); err != nil {
		return fmt.Errorf("resident: handover request: %w", err)
	}
	poke(p, holder, log)
	return nil
}

// takeRequest claims the pending request, if any, by renaming it away, so
// that each request is judged once and a request written meanwhile is a new
// file with its own event. It returns nil when there is none.
func takeRequest(path string) (*request, error) {
	d, name, err := openIn(path, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	taken := name + ".taken-" + randomID()
	err = unix.Renameat(d.FD, name, d.FD, taken)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "rename", Path: path, Err: err}
	}
	defer unix.Unlinkat(d.FD, taken, 0)
	fd, err := d.OpenFile(taken, unix.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("handover request %s: %w", path, err)
	}
	defer unix.Close(fd)
	data, err := statefs.ReadFD(fd, path)
	if err != nil {
		return nil, err
	}
	var r request
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, path, err)
	}
	if r.Schema != schema {
		return nil, fmt.Errorf("%w: %s: unknown schema %d", store.ErrCorrupt, path, r.Schema)
	}
	return &r, nil
}

// withdrawRequest removes the request at path if it is still the one with
// id (the holder did not take it before the role came free).
func withdrawRequest(path, id string) {
	fd, err := openFile(path, unix.O_RDONLY, false)
	if err != nil {
		return
	}
	data, err := statefs.ReadFD(fd, path)
	unix.Close(fd)
	var r request
	if err == nil && json.Unmarshal(data, &r) == nil && r.ID == id {
		unix.Unlink(path)
	}
}

// judge says why the holder of payload p refuses request q, or "" when it
// hands over (R5).
func judge(q request, p payload) string {
	switch {
	case q.Fence != p.Fence:
		return fmt.Sprintf("the request is for fence %d, not this holder's fence %d", q.Fence, p.Fence)
	case q.RequestedAt.Before(p.AcquiredAt):
		return fmt.Sprintf("the request (%s) predates this holder's acquisition (%s)",
			q.RequestedAt.Format(time.RFC3339Nano), p.AcquiredAt.Format(time.RFC3339Nano))
	case !isNewer(q.Build, p.Build):
		return fmt.Sprintf("not from a newer build: %s is not newer than %s", describeBuild(&q.Build), describeBuild(&p.Build))
	case q.PID <= 0 || !alive(q.PID, q.Host):
		return fmt.Sprintf("the requesting pid %d is gone", q.PID)
	}
	return ""
}
