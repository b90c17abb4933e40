package filestore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// schemaVersion is the version of the lease record and queue entry formats.
// A file with any other version is corrupt: an older fencerun must not
// guess at a newer one's state.
const schemaVersion = 1

// record is the content of a slot's lease file (holders.go): the key
// directory's, or holders/<i>/lease.
//
// A slot is held when Holder and Token are set; revoked when Revoked is set
// and Holder kept without Token (the holder may still be stopping its
// command, and Acquire still needs its Marker if it died); free when Holder
// is nil. Fence and Version only grow. Predecessor keeps the last holder
// that died holding the lease after Prune cleared its record, so that its
// leftovers can still be found by the next holder.
type record struct {
	Schema      int           `json:"schema"`
	Fence       uint64        `json:"fence"`
	Version     uint64        `json:"version"`
	Revoked     bool          `json:"revoked,omitempty"`
	Token       string        `json:"token,omitempty"`
	Holder      *holderRecord `json:"holder"`
	Predecessor *holderRecord `json:"predecessor,omitempty"`
	// Leftovers are dead holders' trees that may still run: kept until a
	// holder confirms them stopped (Lease.LeftoversStopped), so that a
	// holder dying while it stops them passes them on. ("trees": an older
	// fencerun's "leftovers" held bare markers.)
	Leftovers []store.Leftover `json:"trees,omitempty"`
}

type holderRecord struct {
	// Kind is how it holds (M1, M2), and with KindSlot its slot of
	// Slots. A record of an earlier fencerun has none: exclusive.
	Kind     store.Kind `json:"kind,omitempty"`
	Slots    int        `json:"slots,omitempty"`
	Slot     int        `json:"slot,omitempty"`
	Name     string     `json:"name"`
	PID      int        `json:"pid"`
	Host     string     `json:"host"`
	Reason   string     `json:"reason,omitempty"`
	Marker   string     `json:"marker,omitempty"`
	Notify   string     `json:"notify,omitempty"` // the holder's socket; see notify_linux.go
	Acquired time.Time  `json:"acquired"`
	Expires  time.Time  `json:"expires"`
	LastTick time.Time  `json:"last_tick,omitzero"`
	Cgroup   string     `json:"cgroup,omitempty"`
	// CommandPID, Group and Session are written by Lease.SetCommand: with
	// the first renewal or tick after the command started where Cgroup
	// finds the tree, else at once.
	CommandPID int             `json:"command_pid,omitempty"`
	Group      store.ProcessID `json:"group,omitzero"`
	Session    store.ProcessID `json:"session,omitzero"`
	// Entry is the queue entry the holder waited in, removed in the
	// background after it took the lease (take): status does not show it
	// as a waiter meanwhile.
	Entry string `json:"entry,omitempty"`
}

// tokenLen is the length of a token in hex: 128 bits.
const tokenLen = 32

func (r *record) held() bool { return r.Holder != nil && r.Token != "" }

// parseRecord parses a lease file. Errors wrap store.ErrCorrupt and name
// path; they never quote the file, which holds the secret token.
func parseRecord(data []byte, path string) (record, error) {
	var r record
	if len(bytes.TrimSpace(data)) == 0 {
		return r, fmt.Errorf("%w: %s is empty", store.ErrCorrupt, path)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, fmt.Errorf("%w: %s: %s", store.ErrCorrupt, path, statefs.JSONProblem(err))
	}
	if r.Schema != schemaVersion {
		return record{}, fmt.Errorf("%w: %s has schema version %d; this fencerun reads version %d", store.ErrCorrupt, path, r.Schema, schemaVersion)
	}
	bad := func(what string) (record, error) {
		return record{}, fmt.Errorf("%w: %s: %s", store.ErrCorrupt, path, what)
	}
	switch {
	case r.Fence > statefs.FenceMax:
		return bad(fmt.Sprintf("fence %d is beyond %d", r.Fence, uint64(statefs.FenceMax)))
	case r.Token != "" && !isHex(r.Token, tokenLen):
		return bad("token is not 128 bits of hex")
	case r.Token != "" && r.Holder == nil:
		return bad("token without a holder")
	case r.Holder != nil && r.Token == "" && !r.Revoked:
		return bad("holder without a token")
	case r.Holder != nil && r.Holder.PID <= 0:
		return bad("holder pid is not positive")
	case r.Holder != nil && (r.Holder.Slot < 0 || !validKind(r.Holder.Kind, r.Holder.Slots, r.Holder.Slot)):
		return bad(fmt.Sprintf("holder kind %q with slot %d of %d is not one fencerun writes", r.Holder.Kind, r.Holder.Slot, r.Holder.Slots))
	case r.Predecessor != nil && r.Predecessor.PID <= 0:
		return bad("predecessor pid is not positive")
	}
	return r, nil
}

func (r *record) marshal() []byte {
	r.Schema = schemaVersion
	b, err := json.Marshal(r)
	if err != nil {
		panic("filestore: marshal record: " + err.Error()) // plain data: cannot fail
	}
	return append(b, '\n')
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if unhex(s[i]) < 0 {
			return false
		}
	}
	return true
}

// unrecordedHolder names a holder that holds the key's live lock while its
// record names none: its record was deleted by hand, or it is between its
// lock and its first write. No process is known to show.
const unrecordedHolder = "a process that holds the key's lock but has no record (deleted, or not yet written)"

// holder describes h for status output, without the token.
func (h *holderRecord) holder(fence uint64) *store.Holder {
	if h == nil {
		return nil
	}
	kind, slots, slot := h.kind()
	return &store.Holder{
		Kind:       kind,
		Slots:      slots,
		Slot:       slot,
		Name:       h.Name,
		PID:        h.PID,
		Host:       h.Host,
		Reason:     h.Reason,
		Acquired:   h.Acquired,
		Expires:    h.Expires,
		Fence:      fence,
		LastTick:   h.LastTick,
		Marker:     h.Marker,
		CommandPID: h.CommandPID,
		Cgroup:     h.Cgroup,
	}
}

// kind is how h holds: its Kind (exclusive when it has none), and with
// KindSlot its Slots and Slot, as store.Holder shows them.
func (h *holderRecord) kind() (store.Kind, int, *int) {
	switch h.Kind {
	case store.KindSlot:
		slot := h.Slot
		return h.Kind, h.Slots, &slot
	case store.KindShared:
		return h.Kind, 0, nil
	}
	return store.KindExclusive, 0, nil
}

// tree is what h's command may have left running if h died (nothing, for
// no h).
func (h *holderRecord) tree() store.Leftover {
	if h == nil {
		return store.Leftover{}
	}
	return store.Leftover{HolderPID: h.PID, Host: h.Host, Marker: h.Marker, Cgroup: h.Cgroup, Group: h.Group, Session: h.Session}
}

// trees is every tree of rec that may still run once its holder (if any)
// is known dead: those not confirmed stopped, the pruned predecessor's
// and the holder's own (store.PassOn).
func (r *record) trees() []store.Leftover {
	return store.PassOn(r.Leftovers, r.Predecessor.tree(), r.Holder.tree())
}

// validKind reports whether a record's or entry's kind, slots and slot
// are one fencerun writes (slot -1: an entry, which has none).
func validKind(k store.Kind, slots, slot int) bool {
	switch k {
	case "", store.KindExclusive, store.KindShared:
		return slots == 0 && slot <= 0
	case store.KindSlot:
		return slots > 1 && slots <= store.MaxSlots && slot < slots
	}
	return false
}

// waiterRecord is the content of a queue entry.
type waiterRecord struct {
	Schema int `json:"schema"`
	// Kind and Slots: what it waits for (M1, M2); an entry of an earlier
	// fencerun has none: exclusive.
	Kind   store.Kind `json:"kind,omitempty"`
	Slots  int        `json:"slots,omitempty"`
	PID    int        `json:"pid"`
	Host   string     `json:"host"`
	Name   string     `json:"name"`
	Reason string     `json:"reason,omitempty"`
	Since  time.Time  `json:"since"`
}

func parseWaiter(data []byte, path string) (waiterRecord, error) {
	var w waiterRecord
	if len(bytes.TrimSpace(data)) == 0 {
		return w, fmt.Errorf("%w: %s is empty", store.ErrCorrupt, path)
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return waiterRecord{}, fmt.Errorf("%w: %s: %s", store.ErrCorrupt, path, statefs.JSONProblem(err))
	}
	if w.Schema != schemaVersion {
		return waiterRecord{}, fmt.Errorf("%w: %s has schema version %d; this fencerun reads version %d", store.ErrCorrupt, path, w.Schema, schemaVersion)
	}
	if w.PID <= 0 {
		return waiterRecord{}, fmt.Errorf("%w: %s: pid is not positive", store.ErrCorrupt, path)
	}
	if !validKind(w.Kind, w.Slots, -1) {
		return waiterRecord{}, fmt.Errorf("%w: %s: kind %q of %d slots is not one fencerun writes", store.ErrCorrupt, path, w.Kind, w.Slots)
	}
	return w, nil
}

func (w *waiterRecord) marshal() []byte {
	w.Schema = schemaVersion
	b, err := json.Marshal(w)
	if err != nil {
		panic("filestore: marshal queue entry: " + err.Error())
	}
	return append(b, '\n')
}

func (w *waiterRecord) holder() store.Holder {
	h := store.Holder{Kind: w.Kind, Name: w.Name, PID: w.PID, Host: w.Host, Reason: w.Reason, Acquired: w.Since}
	switch w.Kind {
	case store.KindSlot:
		h.Slots = w.Slots
	case "":
		h.Kind = store.KindExclusive
	}
	return h
}

// The cancel file holds the fence of the holder it is for, in decimal, so a
// request left over from an earlier holder never stops a later one.
func parseCancel(data []byte) (uint64, bool) {
	n, err := strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
	return n, err == nil
}

func formatCancel(fence uint64) []byte {
	return append(strconv.AppendUint(nil, fence, 10), '\n')
}
