package statefs

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/store"
)

// A write cut at every byte, over a file whose slots hold records of other
// lengths (so what the cut leaves behind is an older record's tail), reads
// as the record before the write; the whole write reads as the new one.
// Each following write, cut or not, goes on from there.
func TestSlotWriteCutAtEveryByte(t *testing.T) {
	records := [][]byte{
		[]byte(`{"n":0,"pad":"` + strings.Repeat("a", 300) + `"}`),
		[]byte(`{"n":1}`),
		[]byte(`{"n":2,"pad":"` + strings.Repeat("b", 40) + `"}`),
		[]byte(`{"n":3,"pad":"` + strings.Repeat("c", 700) + `"}`),
		[]byte(`{"n":4}`),
	}
	file, err := WholeSlots(records[0], 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, next := range records[1:] {
		cur, err := ParseSlotted(file, "f")
		if err != nil || !bytes.Equal(cur.Data, records[i]) {
			t.Fatalf("write %d: reads %q, %v; want %q", i, cur.Data, err, records[i])
		}
		b := encodeSlot(next, cur.Seq+1, cur.Size)
		off := (1 - cur.Slot) * cur.Size
		for cut := range len(b) {
			torn := bytes.Clone(file)
			copy(torn[off:], b[:cut])
			got, err := ParseSlotted(torn, "f")
			if err != nil || !bytes.Equal(got.Data, records[i]) {
				t.Fatalf("write %d cut at byte %d of %d: reads %q, %v; want the record before it", i+1, cut, len(b), got.Data, err)
			}
			// The next write after a cut one goes to the torn slot again,
			// never over the good one.
			if got.Slot != cur.Slot {
				t.Fatalf("write %d cut at byte %d: the good record moved to slot %d", i+1, cut, got.Slot)
			}
		}
		copy(file[off:], b)
	}
	if got, err := ParseSlotted(file, "f"); err != nil || !bytes.Equal(got.Data, records[len(records)-1]) {
		t.Fatalf("after every write: %q, %v", got.Data, err)
	}
}

// A flipped bit anywhere in the newer slot's header or record falls back to
// the older slot; in both, the file is corrupt.
func TestSlotChecksumCatchesEveryFlippedByte(t *testing.T) {
	file, _ := WholeSlots([]byte(`{"n":1}`), 2)
	cur, _ := ParseSlotted(file, "f")
	copy(file[MinSlotSize:], encodeSlot([]byte(`{"n":2}`), cur.Seq+1, cur.Size))
	n := SlotHeader + len(`{"n":2}`)
	for i := range n {
		bad := bytes.Clone(file)
		bad[MinSlotSize+i] ^= 0x10
		if got, err := ParseSlotted(bad, "f"); err != nil || string(got.Data) != `{"n":1}` {
			t.Fatalf("byte %d of the newer slot flipped: %q, %v; want the older record", i, got.Data, err)
		}
		bad[i] ^= 0x10
		if _, err := ParseSlotted(bad, "f"); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("byte %d flipped in both slots: %v, want ErrCorrupt", i, err)
		}
	}
}
