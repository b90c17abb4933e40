// Package slots is the format of a state file written in place: two slots
// of equal, fixed size, each a header and a record, so that a write goes
// to the older slot with one pwrite and leaves the other, the last good
// record, alone (issue 13). The file backend's lease records and fence
// files and the resident role's payload use it.
//
//	offset 0  "FRS\x01"        magic and format version
//	       4  uint32 LE        the slot size (the file is two of them)
//	       8  uint64 LE        sequence number
//	      16  uint32 LE        length of the record
//	      20  uint32 LE        CRC-32 (IEEE) of bytes 0-19 and the record
//	      24  the record
//
// It guarantees that Parse takes the valid slot with the higher sequence
// number, and that a slot written only in part (cut at any byte, torn by a
// power cut) is not valid, so the other slot is taken. It does not make
// writes durable or exclusive: callers fsync where they must and write
// under their own lock. Slots are page-sized (4 KiB, more by powers of two
// for a larger record) so that writing one never rewrites the other's
// page or disk sector.
package slots

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Magic starts every slot.
const Magic = "FRS\x01"

// Header is the length of a slot's header; MinSize and MaxSize bound the
// slot size.
const (
	Header  = 24
	MinSize = 4 << 10
	MaxSize = 32 << 10
	crcAt   = 20
)

// File is what a slotted file held when it was parsed: the newest valid
// slot's record and where it is, which the next write needs.
type File struct {
	Data []byte // the record of the newest valid slot
	Seq  uint64 // its sequence number
	Slot int    // 0 or 1
	Size int    // the slot size; 0: no slotted file (the next write is whole)
}

// ErrNoSlot: raw is slotted but neither slot is valid.
var ErrNoSlot = errors.New("no valid slot (checksums fail)")

// IsSlotted reports whether raw starts like a slotted file.
func IsSlotted(raw []byte) bool { return bytes.HasPrefix(raw, []byte(Magic)) }

// Parse reads a slotted file's bytes. A file that is not two slots is an
// error saying so; one with no valid slot is ErrNoSlot.
func Parse(raw []byte) (File, error) {
	size := len(raw) / 2
	if len(raw)%2 != 0 || size < MinSize || size > MaxSize {
		return File{}, fmt.Errorf("not a record file (%d bytes, not two slots)", len(raw))
	}
	var f File
	found := false
	for i := range 2 {
		data, seq, ok := parseSlot(raw[i*size:(i+1)*size], size)
		if ok && (!found || seq > f.Seq) {
			f.Data, f.Seq, f.Slot, found = data, seq, i, true
		}
	}
	if !found {
		return File{}, ErrNoSlot
	}
	f.Size = size
	return f, nil
}

// ParseKnown is Parse(raw) for a file whose slot was last written by
// this process with enc, the bytes Encode returned for it. Where raw still
// holds enc in that slot and the other slot's sequence number is below
// enc's, the slot is the newest valid one without its checksum being
// computed again (its bytes are those Encode computed it over), and the
// other slot cannot be newer whatever else it holds (only a valid slot
// with a higher number would be). Anything else is Parse(raw). A holder's
// renewal reads its own last write back: the two checksums' table lookups
// on cold caches were a few microseconds of each (P4, docs/DESIGN.md).
func ParseKnown(raw []byte, slot int, enc []byte) (File, error) {
	size := len(raw) / 2
	if slot < 0 || slot > 1 || len(enc) < Header || len(raw)%2 != 0 || size < MinSize || size > MaxSize ||
		len(enc) > size || string(enc[:4]) != Magic || int(binary.LittleEndian.Uint32(enc[4:])) != size ||
		int(binary.LittleEndian.Uint32(enc[16:])) != len(enc)-Header ||
		!bytes.Equal(raw[slot*size:slot*size+len(enc)], enc) {
		return Parse(raw)
	}
	seq := binary.LittleEndian.Uint64(enc[8:])
	other := raw[(1-slot)*size:]
	if string(other[:4]) == Magic && int(binary.LittleEndian.Uint32(other[4:])) == size && binary.LittleEndian.Uint64(other[8:]) >= seq {
		return Parse(raw)
	}
	return File{Data: raw[slot*size+Header : slot*size+len(enc)], Seq: seq, Slot: slot, Size: size}, nil
}

func parseSlot(b []byte, size int) ([]byte, uint64, bool) {
	if string(b[:4]) != Magic || int(binary.LittleEndian.Uint32(b[4:])) != size {
		return nil, 0, false
	}
	seq := binary.LittleEndian.Uint64(b[8:])
	n := int(binary.LittleEndian.Uint32(b[16:]))
	if n > size-Header {
		return nil, 0, false
	}
	if checksum(b[:crcAt], b[Header:Header+n]) != binary.LittleEndian.Uint32(b[crcAt:]) {
		return nil, 0, false
	}
	return b[Header : Header+n], seq, true
}

// checksum is CRC-32 IEEE, whose tables cost nothing to set up:
// Castagnoli's cost 1.2 million instructions at every start on amd64.
func checksum(header, data []byte) uint32 {
	return crc32.Update(crc32.ChecksumIEEE(header), crc32.IEEETable, data)
}

// Encode is one slot's header and record, not padded: the bytes after the
// record are never read.
func Encode(data []byte, seq uint64, size int) []byte {
	b := make([]byte, Header+len(data))
	copy(b, Magic)
	binary.LittleEndian.PutUint32(b[4:], uint32(size))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(data)))
	copy(b[Header:], data)
	binary.LittleEndian.PutUint32(b[crcAt:], checksum(b[:crcAt], data))
	return b
}

// Whole is a slotted file holding data in both slots, the first newer
// (seq, then seq-1), with slots just large enough for it.
func Whole(data []byte, seq uint64) ([]byte, error) {
	size := MinSize
	for size-Header < len(data) {
		size *= 2
	}
	if size > MaxSize {
		return nil, fmt.Errorf("record of %d bytes is over %d", len(data), MaxSize-Header)
	}
	f := make([]byte, 2*size)
	copy(f, Encode(data, seq, size))
	copy(f[size:], Encode(data, seq-1, size))
	return f, nil
}

// Fits reports whether data can be written into a slot of f in place.
func (f File) Fits(data []byte) bool { return f.Size > 0 && len(data) <= f.Size-Header }

// Next is where the next write of data goes in place: the older slot's
// offset and its bytes. f is then as the file will be.
func (f *File) Next(data []byte) (off int64, b []byte) {
	slot := 1 - f.Slot
	b = Encode(data, f.Seq+1, f.Size)
	f.Data, f.Seq, f.Slot = data, f.Seq+1, slot
	return int64(slot * f.Size), b
}
