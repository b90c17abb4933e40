package filestore

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/slots"
	"github.com/fencerun/fencerun/store"
)

// Records are written in place, in the two-slot format of package
// internal/slots: a write goes to the slot with the lower sequence number,
// with the next number, in one pwrite, and leaves the other slot, the last
// good record, alone; readers take the valid slot with the higher number.
// A write cut at any byte (a crash, a full disk, a power cut tearing the
// page) leaves a slot whose checksum fails, and the other slot still holds
// the record before it. No inode is made per write and nothing is renamed,
// which is what made a record write cost hundreds of microseconds on ext4.
//
// A file is made whole (both slots valid, the same record) by writeAtomic,
// durably, the first time a key is written or when a record outgrows its
// slot; only then do in-place writes begin, so every slot on disk always
// holds some record that was written whole. docs/DESIGN.md ("Writes in
// place") gives the power-cut reasoning.
const (
	slotHeader  = slots.Header
	minSlotSize = slots.MinSize
)

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
	} else if !slots.IsSlotted(raw) && trimmed[0] == '{' {
		s.data = trimmed
		return s, nil
	}
	f, err := slots.Parse(raw)
	if err != nil {
		return s, fmt.Errorf("%w: %s %s", store.ErrCorrupt, path, describeSlotError(err))
	}
	s.data, s.seq, s.slot, s.size = f.Data, f.Seq, f.Slot, f.Size
	return s, nil
}

func describeSlotError(err error) string {
	if errors.Is(err, slots.ErrNoSlot) {
		return "has " + err.Error()
	}
	return "is " + err.Error()
}

func encodeSlot(data []byte, seq uint64, size int) []byte { return slots.Encode(data, seq, size) }

func wholeFile(data []byte, seq uint64) ([]byte, error) { return slots.Whole(data, seq) }

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
