package filestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// Records are written in place: a record file holds two slots of equal,
// fixed size, each a header and the record's bytes:
//
//	offset 0  "FRS\x01"        magic and format version
//	       4  uint32 LE        the slot size (the file is two of them)
//	       8  uint64 LE        sequence number
//	      16  uint32 LE        length of the record
//	      20  uint32 LE        CRC-32 (IEEE) of bytes 0-19 and the record
//	      24  the record
//
// A write goes to the slot with the lower sequence number, with the next
// number, in one pwrite, and leaves the other slot, the last good record,
// alone. Readers take the valid slot with the higher sequence number. A
// write cut at any byte (a crash, a full disk, a power cut tearing the
// page) leaves a slot whose checksum fails, and the other slot still holds
// the record before it: readers see the old record or the new one, never
// a torn one. No inode is made per write and nothing is renamed, which is
// what made a record write cost hundreds of microseconds on ext4.
//
// Slots are page-sized (4 KiB, more for a larger record) so the two never
// share a page or a disk sector: writing one never rewrites the other. A
// file is made whole (both slots valid, the same record) by writeAtomic,
// durably, the first time a key is written or when a record outgrows its
// slot; only then do in-place writes begin, so every slot on disk always
// holds some record that was written whole. docs/DESIGN.md ("Writes in
// place") gives the power-cut reasoning.
const (
	slotMagic    = "FRS\x01"
	slotHeader   = 24
	minSlotSize  = 4 << 10
	maxSlotSize  = maxFileSize / 2
	slotCRCStart = 20
)

// slotCRC is CRC-32 IEEE, whose tables cost nothing to set up: Castagnoli's
// cost 1.2 million instructions at every start on amd64, more than a
// quarter of what a whole `fencerun version` takes.
func slotCRC(header, data []byte) uint32 {
	return crc32.Update(crc32.ChecksumIEEE(header), crc32.IEEETable, data)
}

// slotted is what a record file held when it was read: the record's bytes
// and where they came from, which the next write needs.
type slotted struct {
	data   []byte // the record of the newest valid slot
	raw    []byte // the whole file, for salvaging a corrupt one
	seq    uint64 // its sequence number
	slot   int    // 0 or 1
	size   int    // the slot size; 0 if the file must be made whole
	exists bool   // there is a file
}

// parseSlotted reads a record file's bytes. A file that is not two slots
// with at least one valid is corrupt, except a plain JSON record, which an
// earlier fencerun wrote by temporary file and rename: it is read as it is,
// and the next write makes it a slotted file.
func parseSlotted(raw []byte, path string) (slotted, error) {
	s := slotted{raw: raw, exists: true}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 {
		return s, fmt.Errorf("%w: %s is empty", store.ErrCorrupt, path)
	} else if !bytes.HasPrefix(raw, []byte(slotMagic)) && trimmed[0] == '{' {
		s.data = trimmed
		return s, nil
	}
	size := len(raw) / 2
	if len(raw)%2 != 0 || size < minSlotSize || size > maxSlotSize {
		return s, fmt.Errorf("%w: %s is not a record file (%d bytes, not two slots)", store.ErrCorrupt, path, len(raw))
	}
	found := false
	for i := range 2 {
		data, seq, ok := parseSlot(raw[i*size:(i+1)*size], size)
		if ok && (!found || seq > s.seq) {
			s.data, s.seq, s.slot, found = data, seq, i, true
		}
	}
	if !found {
		return s, fmt.Errorf("%w: %s has no valid slot (checksums fail)", store.ErrCorrupt, path)
	}
	s.size = size
	return s, nil
}

// parseSlot checks one slot and returns its record and sequence number.
func parseSlot(b []byte, size int) ([]byte, uint64, bool) {
	if string(b[:4]) != slotMagic || int(binary.LittleEndian.Uint32(b[4:])) != size {
		return nil, 0, false
	}
	seq := binary.LittleEndian.Uint64(b[8:])
	n := int(binary.LittleEndian.Uint32(b[16:]))
	if n > size-slotHeader {
		return nil, 0, false
	}
	if slotCRC(b[:slotCRCStart], b[slotHeader:slotHeader+n]) != binary.LittleEndian.Uint32(b[slotCRCStart:]) {
		return nil, 0, false
	}
	return b[slotHeader : slotHeader+n], seq, true
}

// encodeSlot is one slot's header and record (not padded: the bytes after
// the record are never read).
func encodeSlot(data []byte, seq uint64, size int) []byte {
	b := make([]byte, slotHeader+len(data))
	copy(b, slotMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(size))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(data)))
	copy(b[slotHeader:], data)
	binary.LittleEndian.PutUint32(b[slotCRCStart:], slotCRC(b[:slotCRCStart], data))
	return b
}

// wholeFile is a record file with data in both slots, the first newer.
func wholeFile(data []byte, seq uint64) ([]byte, error) {
	size := minSlotSize
	for size-slotHeader < len(data) {
		size *= 2
	}
	if size > maxSlotSize {
		return nil, fmt.Errorf("record of %d bytes is over %d", len(data), maxSlotSize-slotHeader)
	}
	f := make([]byte, 2*size)
	copy(f, encodeSlot(data, seq, size))
	copy(f[size:], encodeSlot(data, seq-1, size))
	return f, nil
}

// slotWrite is the one call that writes a slot in place. Tests replace it
// to cut a write short at any byte, or to die in the middle of one.
var slotWrite = func(fd int, b []byte, off int64) (int, error) { return unix.Pwrite(fd, b, off) }

// writeSlotted writes data as the record file name in d, which held cur
// when it was read under the same guard. It writes the older slot in
// place; a file that is missing, not yet slotted or too small for data is
// made whole instead, by writeAtomic, durably: a power cut must not leave
// a new name empty. With durable the in-place write is fsynced too.
// Errors name the path and the cause.
func writeSlotted(d dir, name string, cur slotted, data []byte, durable bool) error {
	path := d.join(name)
	if cur.size == 0 || len(data) > cur.size-slotHeader {
		f, err := wholeFile(data, cur.seq+2)
		if err != nil {
			return fmt.Errorf("filestore: write %s: %w", path, err)
		}
		_, err = writeAtomic(d, name, f, writeOpts{durable: true})
		return err
	}
	fd, err := openFile(d, name, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	slot := 1 - cur.slot
	b := encodeSlot(data, cur.seq+1, cur.size)
	for off := 0; off < len(b); {
		n, err := slotWrite(fd, b[off:], int64(slot*cur.size+off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("filestore: write %s: %w", path, err)
		}
		if n == 0 {
			return fmt.Errorf("filestore: write %s: %w", path, unix.EIO)
		}
		off += n
	}
	if durable {
		if err := unix.Fdatasync(fd); err != nil {
			return fmt.Errorf("filestore: write %s: fsync: %w", path, err)
		}
	}
	return nil
}

// readSlotted reads the record file name in d. A missing file gives an
// error that is fs.ErrNotExist.
func readSlotted(d dir, name string) (slotted, error) {
	raw, err := readFile(d, name)
	if err != nil {
		return slotted{}, err
	}
	return parseSlotted(raw, d.join(name))
}
