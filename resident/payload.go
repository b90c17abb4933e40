package resident

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// schema is the version of the payload, handover and standby files.
const schema = 1

// payload is the lock file's content while the role is held (R3).
type payload struct {
	Schema     int         `json:"schema"`
	PID        int         `json:"pid"` // the fencerun process holding the role
	Host       string      `json:"host"`
	Surface    string      `json:"surface"` // the holder name
	Reason     string      `json:"reason,omitempty"`
	AcquiredAt time.Time   `json:"acquired_at"`
	Store      string      `json:"store"`
	LastTick   time.Time   `json:"last_tick,omitzero"`
	StuckAfter duration    `json:"stuck_after,omitzero"` // 0: never stuck
	Build      store.Build `json:"build"`
	Fence      uint64      `json:"fence"`
	Marker     string      `json:"marker,omitempty"` // not shown by status
	Cgroup     string      `json:"cgroup,omitempty"`
	// Notify is the holder's socket beside the lock file (notify_linux.go).
	Notify string `json:"notify,omitempty"`
	// Leftovers are dead holders' trees that may still run, kept until
	// this holder has stopped them (Role.LeftoversStopped). ("trees": an
	// older fencerun's "leftovers" held bare markers.)
	Leftovers  []store.Leftover `json:"trees,omitempty"`
	CommandPID int              `json:"command_pid,omitempty"`
	Group      store.ProcessID  `json:"group,omitzero"`
	Session    store.ProcessID  `json:"session,omitzero"`
	// HandingOver: the holder accepted a handover request and is stopping.
	HandingOver bool `json:"handing_over,omitempty"`
	// HandoverRefused: the holder's answer to the last request it refused,
	// read by the newcomer that sent it.
	HandoverRefused *refusalNote `json:"handover_refused,omitempty"`
}

type refusalNote struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// duration is a time.Duration written as "5m0s".
type duration time.Duration

func (d duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = duration(v)
	return err
}

// decodePayload parses a payload read from path; empty reports a file with
// no payload in it. The file is two slots (internal/statefs) holding the
// payload, or nothing for a released role; a plain JSON payload, as
// earlier fencerun wrote, is read too. A file of no bytes at all is never
// fencerun's (a new lock file is made whole, as a released role: lock):
// it is empty and corrupt both (B4), for a held lock is then someone's
// flock(1), and an unheld one has lost whatever it named.
func decodePayload(data []byte, path string) (p payload, empty bool, err error) {
	if statefs.IsSlotted(data) {
		f, err := statefs.ParseSlotted(data, path)
		if err != nil {
			return payload{}, false, err
		}
		data = bytes.TrimSpace(f.Data)
		if len(data) == 0 {
			return payload{}, true, nil
		}
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return payload{}, true, fmt.Errorf("%w: %s is empty", store.ErrCorrupt, path)
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return payload{}, false, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, path, err)
	}
	switch {
	case p.Schema != schema:
		err = fmt.Errorf("unknown schema %d", p.Schema)
	case p.PID <= 0:
		err = fmt.Errorf("pid %d", p.PID)
	case p.Fence == 0:
		err = fmt.Errorf("no fence")
	case p.Fence > statefs.FenceMax-2*statefs.FenceBlock:
		// No fence this high is ever handed out with fences left above
		// it: the next holder's would be used up (or, beyond statefs.FenceMax,
		// wrap around), so every Acquire would fail while release --force
		// saw a free role with nothing to clear.
		err = fmt.Errorf("fence %d is beyond %d", p.Fence, uint64(statefs.FenceMax-2*statefs.FenceBlock))
	case p.AcquiredAt.IsZero():
		err = fmt.Errorf("no acquired_at")
	}
	if err != nil {
		return payload{}, false, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, path, err)
	}
	return p, false, nil
}

// readPayload reads the payload from fd under an OFD read lock, so that it
// never sees a write half done.
func readPayload(fd int, path string) (payload, bool, error) {
	if err := lockRange(fd, unix.F_RDLCK, path); err != nil {
		return payload{}, false, err
	}
	data, err := statefs.ReadFD(fd, path)
	lockRange(fd, unix.F_UNLCK, path)
	if err != nil {
		return payload{}, false, err
	}
	return decodePayload(data, path)
}

// holder is the payload as status shows it.
func (p payload) holder() *store.Holder {
	b := p.Build
	return &store.Holder{
		Name:       p.Surface,
		PID:        p.PID,
		Host:       p.Host,
		Reason:     p.Reason,
		Acquired:   p.AcquiredAt,
		Fence:      p.Fence,
		LastTick:   p.LastTick,
		Build:      &b,
		CommandPID: p.CommandPID,
		Marker:     p.Marker,
		Cgroup:     p.Cgroup,
	}
}

// trees is every tree of a dead holder's payload that may still run: those
// it had not confirmed stopped, and its own (store.PassOn).
func (p payload) trees() []store.Leftover {
	return store.PassOn(p.Leftovers, store.Leftover{HolderPID: p.PID, Host: p.Host, Marker: p.Marker, Cgroup: p.Cgroup, Group: p.Group, Session: p.Session})
}

// stuck reports whether the holder ticked and then stayed silent for its
// stuck_after, as of now (R7).
func (p payload) stuck(now time.Time) bool {
	return p.StuckAfter > 0 && !p.LastTick.IsZero() && now.Sub(p.LastTick) >= time.Duration(p.StuckAfter)
}

// payloadFile is the holder's writing end of the lock file.
type payloadFile struct {
	fd   int
	path string
	cur  statefs.Slotted // as last written (or found): Size 0 until the file is slotted
}

// openPayloadFile is the holder's writing end of the lock file fd, whose
// content data was read just before.
func openPayloadFile(fd int, path string, data []byte) payloadFile {
	f := payloadFile{fd: fd, path: path}
	if statefs.IsSlotted(data) {
		f.cur, _ = statefs.ParseSlotted(data, path) // not valid: made whole at the first write
	}
	return f
}

// write replaces the payload in place, under an OFD write lock: one pwrite
// into the older of the file's two slots (internal/statefs), the other, the
// payload before, left alone. Killed or cut short at any byte, or torn by
// a power cut, the file still reads as the old payload or the new one.
// The first write into a file that is not slotted yet (empty, or an
// earlier fencerun's JSON) writes both slots at once.
func (f *payloadFile) write(p payload) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("resident: encode payload: %w", err)
	}
	return f.put(data)
}

// clear empties the payload: the role is released.
func (f *payloadFile) clear() error { return f.put(nil) }

func (f *payloadFile) put(data []byte) error {
	if err := lockRange(f.fd, unix.F_WRLCK, f.path); err != nil {
		return err
	}
	defer lockRange(f.fd, unix.F_UNLCK, f.path)
	if !f.cur.InPlace(data) {
		whole, err := statefs.WholeSlots(data, f.cur.Seq+2)
		if err != nil {
			return fmt.Errorf("resident: %s: %w", f.path, err)
		}
		if err := statefs.WriteSlotAt(f.fd, f.path, whole, 0); err != nil {
			return err
		}
		if err := unix.Ftruncate(f.fd, int64(len(whole))); err != nil {
			return &os.PathError{Op: "truncate", Path: f.path, Err: err}
		}
		f.cur, _ = statefs.ParseSlotted(whole, f.path)
		return nil
	}
	next := f.cur
	off, b := next.Next(data)
	if err := statefs.WriteSlotAt(f.fd, f.path, b, off); err != nil {
		return err
	}
	f.cur = next
	return nil
}
