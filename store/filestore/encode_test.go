package filestore

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// TestAppendRecordIsEncodingJSON: where appendRecord encodes a record at
// all, its bytes are encoding/json's, for every field set or not, zero or
// not, and any string; where it declines, marshal still gives
// encoding/json's bytes.
func TestAppendRecordIsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "sleep", "FENCERUN_TICK=/tmp/x/ticks/t-0f", "with space", `q"uote`, `back\slash`,
		"<html>&", "tab\there", "nl\n", "ünï", "\x7f", "\xff", "/sys/fs/cgroup/unified/fencerun/k-1"}
	pick := func() string { return strs[rng.IntN(len(strs))] }
	zones := []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+30*60), time.FixedZone("odd", 37), time.Local}
	tm := func() time.Time {
		switch rng.IntN(6) {
		case 0:
			return time.Time{}
		case 1:
			return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		case 2:
			return time.Now() // with a monotonic reading
		}
		return time.Unix(rng.Int64N(1<<34), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
	}
	num := func() uint64 { return []uint64{0, 1, 7, 1 << 40, 1<<53 - 1}[rng.IntN(5)] }
	pid := func() store.ProcessID {
		if rng.IntN(2) == 0 {
			return store.ProcessID{}
		}
		return store.ProcessID{ID: int(num() % (1 << 22)), Start: num()}
	}
	fast := 0
	for i := range 5000 {
		r := record{Fence: num(), Version: num(), Revoked: rng.IntN(3) == 0}
		if rng.IntN(4) > 0 {
			r.Token = []string{"", "0123456789abcdef0123456789abcdef", pick()}[rng.IntN(3)]
		}
		if rng.IntN(5) > 0 {
			r.Holder = &holderRecord{Name: pick(), PID: int(num() % 100000), Host: pick(), Reason: pick(), Marker: pick(),
				Notify: pick(), Acquired: tm(), Expires: tm(), LastTick: tm(), Cgroup: pick(), CommandPID: int(num() % 100000),
				Group: pid(), Session: pid(), Entry: pick()}
		}
		if rng.IntN(8) == 0 {
			r.Predecessor = &holderRecord{Name: "p", PID: 2}
		}
		if rng.IntN(8) == 0 {
			r.Leftovers = []store.Leftover{{}}
		}
		want, err := json.Marshal(&record{Schema: schemaVersion, Fence: r.Fence, Version: r.Version, Revoked: r.Revoked,
			Token: r.Token, Holder: r.Holder, Predecessor: r.Predecessor, Leftovers: r.Leftovers})
		if err != nil {
			// encoding/json refuses it (a year beyond 9999): appendRecord
			// must decline too.
			r.Schema = schemaVersion
			if _, ok := appendRecord(nil, &r); ok {
				t.Fatalf("record %d: encoding/json refuses it (%v), appendRecord does not", i, err)
			}
			continue
		}
		r.Schema = schemaVersion
		if got, ok := appendRecord(nil, &r); ok {
			fast++
			if !bytes.Equal(got, want) {
				t.Fatalf("record %d:\nappendRecord: %s\nencoding/json: %s", i, got, want)
			}
		}
		if got := r.marshal(); !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("record %d: marshal:\n%s\nencoding/json:\n%s", i, got, want)
		}
	}
	if fast < 500 {
		t.Fatalf("appendRecord encoded only %d of 5000 records itself: the test does not test it", fast)
	}
}
