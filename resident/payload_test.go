package resident

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
)

func testPayload(pid int) payload {
	return payload{Schema: schema, PID: pid, Host: "h", Surface: "s", AcquiredAt: time.Unix(1, 0).UTC(), Store: "/x", Fence: uint64(pid)}
}

// The holder's writes through payloadFile: a plain file made slotted by
// the first write, then each write in place; a release reads as empty.
func TestPayloadWritesInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	if err := os.WriteFile(path, []byte(`{"schema":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	data, _ := os.ReadFile(path)
	f := openPayloadFile(fd, path, data)
	for pid := 1; pid <= 3; pid++ {
		if err := f.write(testPayload(pid)); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		got, empty, err := decodePayload(data, path)
		if err != nil || empty || got.PID != pid {
			t.Fatalf("after write %d: %+v, empty %v, %v", pid, got, empty, err)
		}
		if len(data) != 2*statefs.MinSlotSize {
			t.Fatalf("file of %d bytes, want two slots of %d", len(data), statefs.MinSlotSize)
		}
	}
	if err := f.clear(); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if _, empty, err := decodePayload(data, path); err != nil || !empty {
		t.Fatalf("after clear: empty %v, %v", empty, err)
	}
}

// A payload write cut at every byte reads as the payload before it; the
// whole write as the new one.
func TestPayloadWriteCutAtEveryByte(t *testing.T) {
	old, _ := json.Marshal(testPayload(7))
	file, err := statefs.WholeSlots(old, 2)
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := statefs.ParseSlotted(file, "lock")
	next, _ := json.Marshal(testPayload(8))
	off, b := cur.Next(next)
	for cut := 0; cut <= len(b); cut++ {
		torn := bytes.Clone(file)
		copy(torn[off:], b[:cut])
		got, _, err := decodePayload(torn, "lock")
		want := 7
		// The new one where the bytes the cut left out were there already
		// (the same tail from the payload before): the write landed whole.
		if bytes.Equal(torn[int(off)+cut:int(off)+len(b)], b[cut:]) {
			want = 8
		}
		if err != nil || got.PID != want {
			t.Fatalf("cut at byte %d of %d: %+v, %v; want pid %d", cut, len(b), got, err, want)
		}
	}
}
