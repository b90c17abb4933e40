package filestore

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// FuzzAppendRecordIsEncodingJSON: wherever appendRecord encodes a record
// itself, its bytes are encoding/json's, for any string (escapes, control
// characters, invalid UTF-8, U+2028), number and time. Run it longer with
// go test -fuzz FuzzAppendRecordIsEncodingJSON ./store/filestore.
func FuzzAppendRecordIsEncodingJSON(f *testing.F) {
	f.Add("sleep", "host", "", "FENCERUN_TICK=x", "", "/sys/fs/cgroup/x", "", "0123456789abcdef0123456789abcdef",
		uint64(1), uint64(2), 3, int64(1700000000), int64(5), 0, false, 7, uint64(9))
	f.Add("q\"u\\o\u2028te", "h\x00\xff", "<r>&", "\n", "\t", "\u2029", "e\x7f", "",
		uint64(1<<63), uint64(0), -1, int64(-62135596800), int64(999999999), 37, true, 0, uint64(0))
	f.Fuzz(func(t *testing.T, name, host, reason, marker, notify, cgroup, entry, token string,
		fence, version uint64, pid int, sec, nsec int64, off int, revoked bool, gid int, gstart uint64) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("z", off))
		r := record{Schema: schemaVersion, Fence: fence, Version: version, Revoked: revoked, Token: token,
			Holder: &holderRecord{Name: name, PID: pid, Host: host, Reason: reason, Marker: marker, Notify: notify,
				Acquired: tm, Expires: tm.Add(time.Duration(nsec)), LastTick: tm, Cgroup: cgroup, CommandPID: pid,
				Group: store.ProcessID{ID: gid, Start: gstart}, Session: store.ProcessID{ID: gid}, Entry: entry}}
		for _, rec := range []record{r, {Schema: schemaVersion, Fence: fence, Token: token}} {
			want, err := json.Marshal(&rec)
			got, ok := appendRecord(nil, &rec)
			if err != nil {
				if ok {
					t.Fatalf("encoding/json refuses the record (%v), appendRecord encodes it:\n%s", err, got)
				}
				continue
			}
			if ok && !bytes.Equal(got, want) {
				t.Fatalf("appendRecord:\n%s\nencoding/json:\n%s", got, want)
			}
			if m := rec.marshal(); !bytes.Equal(m, append(want, '\n')) {
				t.Fatalf("marshal:\n%s\nencoding/json:\n%s", m, want)
			}
		}
	})
}
