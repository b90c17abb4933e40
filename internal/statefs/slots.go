package statefs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The format of a file written in place: two slots of equal, fixed size,
// each a header and a record, so that a write goes to the older slot with
// one pwrite and leaves the other, the last good record, alone (issue 13).
//
//	offset 0  "FRS\x01"        magic and format version
//	       4  uint32 LE        the slot size (the file is two of them)
//	       8  uint64 LE        sequence number
//	      16  uint32 LE        length of the record
//	      20  uint32 LE        CRC-32 (IEEE) of bytes 0-19 and the record
//	      24  the record
//
// parseSlots takes the valid slot with the higher sequence number; a slot
// written only in part (cut at any byte, torn by a power cut) is not
// valid, so the other slot is taken. Slots are page-sized (4 KiB, more by
// powers of two for a larger record) so that writing one never rewrites
// the other's page or disk sector.
//
// SlotHeader is the length of a slot's header, MinSlotSize the smallest
// slot.
const (
	slotMagic   = "FRS\x01"
	SlotHeader  = 24
	MinSlotSize = 4 << 10
	maxSlotSize = 32 << 10
	crcAt       = 20
)

// errNoSlot: a file is slotted but neither slot is valid.
var errNoSlot = errors.New("no valid slot (checksums fail)")

// IsSlotted reports whether raw starts like a slotted file.
func IsSlotted(raw []byte) bool { return bytes.HasPrefix(raw, []byte(slotMagic)) }

// parseSlots reads a slotted file's bytes. A file that is not two slots is
// an error saying so; one with no valid slot is errNoSlot.
func parseSlots(raw []byte) (Slotted, error) {
	size := len(raw) / 2
	if len(raw)%2 != 0 || size < MinSlotSize || size > maxSlotSize {
		return Slotted{}, fmt.Errorf("not a record file (%d bytes, not two slots)", len(raw))
	}
	var f Slotted
	found := false
	for i := range 2 {
		data, seq, ok := parseSlot(raw[i*size:(i+1)*size], size)
		if ok && (!found || seq > f.Seq) {
			f.Data, f.Seq, f.Slot, found = data, seq, i, true
		}
	}
	if !found {
		return Slotted{}, errNoSlot
	}
	f.Size = size
	return f, nil
}

func parseSlot(b []byte, size int) ([]byte, uint64, bool) {
	if string(b[:4]) != slotMagic || int(binary.LittleEndian.Uint32(b[4:])) != size {
		return nil, 0, false
	}
	seq := binary.LittleEndian.Uint64(b[8:])
	n := int(binary.LittleEndian.Uint32(b[16:]))
	if n > size-SlotHeader {
		return nil, 0, false
	}
	if checksum(b[:crcAt], b[SlotHeader:SlotHeader+n]) != binary.LittleEndian.Uint32(b[crcAt:]) {
		return nil, 0, false
	}
	return b[SlotHeader : SlotHeader+n], seq, true
}

// checksum is CRC-32 IEEE, whose tables cost nothing to set up:
// Castagnoli's cost 1.2 million instructions at every start on amd64.
func checksum(header, data []byte) uint32 {
	return crc32.Update(crc32.ChecksumIEEE(header), crc32.IEEETable, data)
}

// encodeSlot is one slot's header and record, not padded: the bytes after
// the record are never read.
func encodeSlot(data []byte, seq uint64, size int) []byte {
	b := make([]byte, SlotHeader+len(data))
	copy(b, slotMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(size))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(data)))
	copy(b[SlotHeader:], data)
	binary.LittleEndian.PutUint32(b[crcAt:], checksum(b[:crcAt], data))
	return b
}

// WholeSlots is a slotted file holding data in both slots, the first newer
// (seq, then seq-1), with slots just large enough for it.
func WholeSlots(data []byte, seq uint64) ([]byte, error) {
	size := MinSlotSize
	for size-SlotHeader < len(data) {
		size *= 2
	}
	if size > maxSlotSize {
		return nil, fmt.Errorf("record of %d bytes is over %d", len(data), maxSlotSize-SlotHeader)
	}
	f := make([]byte, 2*size)
	copy(f, encodeSlot(data, seq, size))
	copy(f[size:], encodeSlot(data, seq-1, size))
	return f, nil
}

// InPlace reports whether data can be written into a slot of the file
// that held s, in place (Next); if not, the file must be made whole anew
// (WholeSlots).
func (s Slotted) InPlace(data []byte) bool {
	return s.Size != 0 && len(data) <= s.Size-SlotHeader
}

// Next is where the next write of data goes in place: the older slot's
// offset and its bytes. s is then as the file will be.
func (s *Slotted) Next(data []byte) (off int64, b []byte) {
	slot := 1 - s.Slot
	b = encodeSlot(data, s.Seq+1, s.Size)
	s.Data, s.Seq, s.Slot = data, s.Seq+1, slot
	return int64(slot * s.Size), b
}
