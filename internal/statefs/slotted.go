package statefs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// Records written in place, in the two-slot format of slots.go: a write
// goes to the slot with the lower sequence number, with the next number,
// in one pwrite, and leaves the other slot, the last good record, alone;
// readers take the valid slot with the higher number. A write cut at any
// byte (a crash, a full disk, a power cut tearing the page) leaves a slot
// whose checksum fails, and the other slot still holds the record before
// it. No inode is made per write and nothing is renamed.
//
// A file is made whole (both slots valid, the same record) by WriteAtomic,
// durably, the first time it is written or when a record outgrows its
// slot; only then do in-place writes begin, so every slot on disk always
// holds some record that was written whole. Only a power cut that tears
// both slots loses the record: that needs two writes of it in flight to
// the disk at the cut, each torn. It then reads as corrupt and fails
// closed until release --force.

// Slotted is what a record file held when it was read: the record's bytes
// and where they came from, which the next write needs.
type Slotted struct {
	Data   []byte // the record of the newest valid slot
	Raw    []byte // the whole file, for salvaging a corrupt one
	Seq    uint64 // its sequence number
	Slot   int    // 0 or 1
	Size   int    // the slot size; 0 if the file must be made whole
	Exists bool   // there is a file
}

// ParseSlotted reads a record file's bytes. A file that is not two slots
// with at least one valid is corrupt, except a plain JSON record, which an
// earlier fencerun wrote by temporary file and rename: it is read as it is,
// and the next write makes it a slotted file.
func ParseSlotted(raw []byte, path string) (Slotted, error) {
	s := Slotted{Raw: raw, Exists: true}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 {
		return s, fmt.Errorf("%w: %s is empty", store.ErrCorrupt, path)
	} else if !IsSlotted(raw) && trimmed[0] == '{' {
		s.Data = trimmed
		return s, nil
	}
	f, err := parseSlots(raw)
	if err != nil {
		return s, fmt.Errorf("%w: %s %s", store.ErrCorrupt, path, describeSlotError(err))
	}
	s.Data, s.Seq, s.Slot, s.Size = f.Data, f.Seq, f.Slot, f.Size
	return s, nil
}

func describeSlotError(err error) string {
	if errors.Is(err, errNoSlot) {
		return "has " + err.Error()
	}
	return "is " + err.Error()
}

// ReadSlotted reads the record file name in d. A missing file gives an
// error that is fs.ErrNotExist.
func (d Dir) ReadSlotted(name string) (Slotted, error) {
	raw, err := d.ReadFile(name)
	if err != nil {
		return Slotted{}, err
	}
	return ParseSlotted(raw, d.Join(name))
}

// SlotWrite is the one call that writes a slot in place. The file
// backend's tests replace it to cut a write short at any byte, or to die
// in the middle of one.
var SlotWrite = func(fd int, b []byte, off int64) (int, error) { return unix.Pwrite(fd, b, off) }

// WriteSlotAt writes b at off in the file open as fd (at path, for
// messages) through SlotWrite, whole.
func WriteSlotAt(fd int, path string, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := SlotWrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if n == 0 {
			return fmt.Errorf("write %s: %w", path, unix.EIO)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// WriteSlotted writes data as the record file name in d, which held cur
// when it was read under the caller's lock. It writes the older slot in
// place; a file that is missing, not yet slotted or too small for data is
// made whole instead, by WriteAtomic, its data durable before the rename:
// a power cut must not leave a new name empty. With durable the rename is
// made durable too (the directory fsynced), and the in-place write is
// fsynced; without, a crash may lose the rename, and the name then keeps
// the file it named before, or none. Errors name the path and the cause.
func (d Dir) WriteSlotted(name string, cur Slotted, data []byte, durable bool) error {
	return d.WriteSlottedFD(-1, name, cur, data, durable)
}

// WriteSlottedFD is WriteSlotted through fd, name open for writing (the
// file cur was read from, under the same lock), which a write in place
// then needs no open for; fd < 0 opens name. A file made whole is a new
// file under the name, which fd is not: cur.InPlace(data) tells which.
func (d Dir) WriteSlottedFD(fd int, name string, cur Slotted, data []byte, durable bool) error {
	path := d.Join(name)
	if !cur.InPlace(data) {
		f, err := WholeSlots(data, cur.Seq+2)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		_, err = d.WriteAtomic(name, f, WriteOpts{Durable: true, DataOnly: !durable})
		return err
	}
	if fd < 0 {
		var err error
		if fd, err = d.OpenFile(name, unix.O_WRONLY); err != nil {
			return err
		}
		defer unix.Close(fd)
	}
	off, b := cur.Next(data)
	if err := WriteSlotAt(fd, path, b, off); err != nil {
		return err
	}
	if durable {
		if err := unix.Fdatasync(fd); err != nil {
			return fmt.Errorf("write %s: fsync: %w", path, err)
		}
	}
	return nil
}

// Salvage finds the largest number after "field": in what is left of a
// corrupt record, so that a fence that is still readable is not reused.
func Salvage(data []byte, field string) uint64 {
	re := regexp.MustCompile(`"` + regexp.QuoteMeta(field) + `"\s*:\s*([0-9]{1,20})`)
	var best uint64
	for _, m := range re.FindAllSubmatch(data, -1) {
		if n, err := strconv.ParseUint(string(m[1]), 10, 64); err == nil && n > best {
			best = n
		}
	}
	return best
}

// JSONProblem describes a JSON error without quoting the input (a record
// may hold a secret token).
func JSONProblem(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("not valid JSON at byte %d", e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("field %q has the wrong type", e.Field)
	}
	if err.Error() == "unexpected end of JSON input" {
		return "truncated JSON"
	}
	return "not a valid record"
}
