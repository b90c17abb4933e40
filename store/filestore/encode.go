package filestore

import (
	"strconv"
	"time"

	"github.com/fencerun/fencerun/internal/jsonstr"
	"github.com/fencerun/fencerun/store"
)

// appendRecord appends r as encoding/json would encode it, byte for byte,
// without reflection, or returns ok false where r holds something it does
// not encode itself (a predecessor, leftover trees, a string that JSON
// escapes, a year beyond 9999): marshal then uses encoding/json. A holder's
// renewal writes its record once a second at a 3 s TTL, and encoding/json
// was an eighth of that renewal's CPU (P4, docs/DESIGN.md); the test
// compares the two encodings over every field.
func appendRecord(b []byte, r *record) ([]byte, bool) {
	if r.Predecessor != nil || len(r.Leftovers) > 0 {
		return b, false
	}
	ok := true
	b = append(b, `{"schema":`...)
	b = strconv.AppendInt(b, int64(r.Schema), 10)
	b = append(b, `,"fence":`...)
	b = strconv.AppendUint(b, r.Fence, 10)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, r.Version, 10)
	if r.Revoked {
		b = append(b, `,"revoked":true`...)
	}
	if r.Token != "" {
		b = appendField(b, "token", r.Token, &ok)
	}
	if r.Holder == nil {
		return append(b, `,"holder":null}`...), ok
	}
	h := r.Holder
	b = append(b, `,"holder":{"name":`...)
	b = appendString(b, h.Name, &ok)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(h.PID), 10)
	b = appendField(b, "host", h.Host, &ok)
	for _, f := range [...]struct{ name, v string }{{"reason", h.Reason}, {"marker", h.Marker}, {"notify", h.Notify}} {
		if f.v != "" {
			b = appendField(b, f.name, f.v, &ok)
		}
	}
	b = appendTime(b, "acquired", h.Acquired, &ok)
	b = appendTime(b, "expires", h.Expires, &ok)
	if !h.LastTick.IsZero() {
		b = appendTime(b, "last_tick", h.LastTick, &ok)
	}
	if h.Cgroup != "" {
		b = appendField(b, "cgroup", h.Cgroup, &ok)
	}
	if h.CommandPID != 0 {
		b = append(b, `,"command_pid":`...)
		b = strconv.AppendInt(b, int64(h.CommandPID), 10)
	}
	b = appendProcess(b, "group", h.Group)
	b = appendProcess(b, "session", h.Session)
	if h.Entry != "" {
		b = appendField(b, "entry", h.Entry, &ok)
	}
	return append(b, "}}"...), ok
}

func appendField(b []byte, name, v string, ok *bool) []byte {
	b = append(append(append(b, `,"`...), name...), `":`...)
	return appendString(b, v, ok)
}

// appendString appends s quoted; a byte JSON would escape clears ok (the
// caller then encodes with encoding/json).
func appendString(b []byte, s string, ok *bool) []byte {
	b, plain := jsonstr.AppendPlain(b, s)
	*ok = *ok && plain
	return b
}

// appendTime appends t as time.Time's MarshalJSON does; a year or zone
// offset it refuses clears ok.
func appendTime(b []byte, name string, t time.Time, ok *bool) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		*ok = false
	}
	if _, off := t.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		*ok = false
	}
	b = append(append(append(b, `,"`...), name...), `":"`...)
	return append(t.AppendFormat(b, time.RFC3339Nano), '"')
}

// appendProcess appends p unless it is zero (omitzero).
func appendProcess(b []byte, name string, p store.ProcessID) []byte {
	if p == (store.ProcessID{}) {
		return b
	}
	b = append(append(append(b, `,"`...), name...), `":{"id":`...)
	b = strconv.AppendInt(b, int64(p.ID), 10)
	b = append(b, `,"start":`...)
	return append(strconv.AppendUint(b, p.Start, 10), '}')
}
