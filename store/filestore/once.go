package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// A key's done IDs (--once, O1-O4) are the file done in its directory:
// the last store.MaxDone marks, newest first, replaced whole by
// WriteAtomic (B5) under the key's guard held exclusively, so readers
// need no lock. A holder writes it at its release, after the same
// compare-and-swap on the record's token and version that a renewal
// makes, and before the free record: a lease lost before that marks
// nothing, and a holder that dies between the two leaves its ID done and
// its record to be taken over, which is the truth (its command had
// succeeded under the lease). A key with done IDs keeps its directory
// through Prune.

// doneFile is the name of a key's done IDs.
const doneFile = "done"

// doneList is the content of the done file.
type doneList struct {
	Schema int          `json:"schema"`
	Done   []store.Done `json:"done"`
}

// readDone reads kd's done IDs; none when the file is missing.
func readDone(kd dir) ([]store.Done, error) {
	var l doneList
	err := readJSONFile(kd, doneFile, &l, &l.Schema)
	return l.Done, err
}

// readJSONFile reads name in kd into v, whose schema version is *schema
// once parsed; a missing file leaves v as it was. A file that does not
// parse, or of another version, is corrupt.
func readJSONFile(kd dir, name string, v any, schema *int) error {
	data, err := kd.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %s", store.ErrCorrupt, kd.Join(name), statefs.JSONProblem(err))
	}
	if *schema != schemaVersion {
		return fmt.Errorf("%w: %s has schema version %d; this fencerun reads version %d", store.ErrCorrupt, kd.Join(name), *schema, schemaVersion)
	}
	return nil
}

// writeJSONFile replaces name in kd with v as JSON, atomically (B5).
func writeJSONFile(kd dir, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("filestore: %s: %w", kd.Join(name), err) // plain data: cannot fail
	}
	_, err = kd.WriteAtomic(name, append(data, '\n'), statefs.WriteOpts{})
	return err
}

// writeDone replaces kd's done IDs with done (none: the file is removed);
// the caller holds the key's guard exclusively.
func writeDone(kd dir, done []store.Done) error {
	if len(done) == 0 {
		if err := unix.Unlinkat(kd.FD, doneFile, 0); err != nil && err != unix.ENOENT {
			return fmt.Errorf("filestore: remove %s: %w", kd.Join(doneFile), err)
		}
		return nil
	}
	return writeJSONFile(kd, doneFile, doneList{Schema: schemaVersion, Done: done})
}

// Done reads key's done IDs (see store.Store), without the guard: the
// file is only ever replaced whole.
func (s *Store) Done(ctx context.Context, key string) ([]store.Done, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, err
	}
	kd, err := s.keyDir(key, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer kd.Close()
	return readDone(kd)
}

// Reopen forgets that id was done under key (see store.Store), under the
// key's guard held exclusively, as a holder's mark is written.
func (s *Store) Reopen(ctx context.Context, key, id string) (bool, error) {
	kd, g, ok, err := s.lockExisting(ctx, key, "once-reset")
	if !ok {
		return false, err
	}
	defer kd.Close()
	defer unix.Close(g)
	done, err := readDone(kd)
	if errors.Is(err, store.ErrCorrupt) {
		// Nothing in it can be kept: reopening one ID reopens them all.
		s.log.Warn("cleared done IDs that cannot be read; every ID of the key is open again", "key", key, "error", err)
		return true, writeDone(kd, nil)
	}
	kept, found := store.ReopenDone(done, id)
	if err != nil || !found {
		return false, err
	}
	return true, writeDone(kd, kept)
}

// markDone marks id done for the lease's key, under the guard its release
// holds exclusively, if the record is still this lease's as of its last
// write (a renewal's compare-and-swap, and the names still the files it
// holds); else an error wrapping store.ErrLost, and nothing is marked.
func (l *Lease) markDone(id string, rec record, err error) error {
	if serr := l.stillThere(); serr != nil {
		return serr
	}
	if err := l.owns(rec, err); err != nil {
		return err
	}
	done, err := readDone(l.kd)
	if err != nil {
		// An unreadable list fails closed: the ID stays open, and the
		// next run for it says why.
		return err
	}
	d := store.Done{ID: id, Fence: l.fence, At: l.s.now()}
	if h := rec.Holder; h != nil {
		d.Name, d.PID, d.Host = h.Name, h.PID, h.Host
	}
	if err := writeDone(l.kd, store.MarkDone(done, d)); err != nil {
		return err
	}
	wakeAwaiters(l.kd)
	return nil
}

// ReleaseDone releases the lease and marks id done with it (see
// store.Lease).
func (l *Lease) ReleaseDone(ctx context.Context, id string) error {
	if err := store.ValidateID(id); err != nil {
		return err
	}
	return l.release(ctx, id)
}
