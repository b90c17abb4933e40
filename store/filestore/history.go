package filestore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// A key's history (N2) is the holdings that ended, kept in chunks of
// historyChunk holdings, the newest in the file history, older ones in
// history.1, history.2, ... (oldest last), and the holding that lasts,
// which is the lease record's holder (one per slot: holders.go). A holding is written to the history
// once, whole, when it ends: by its holder's release, with how it ended;
// by Revoke (which the revoked holder's release then leaves alone); or,
// for a holder that died holding, by whoever clears its record (the next
// holder's take, Prune) as "unknown (holder died)". The take itself costs
// no write beyond the record's, which carries the start (B5: the record's
// checksummed slot). A crash loses at most the end of the last holding:
// its record stays, and reads as a dead holder's. Each chunk is replaced
// whole by WriteAtomic under the key's guard held exclusively, so that a
// release's write costs a chunk's size, never the whole history's. A
// chunk that is full when a holding is added is moved to history.1 (the
// older ones one further, the oldest chunk dropped) before the new one is
// begun: between store.MaxHistory+1 and MaxHistory+historyChunk holdings
// are on disk, and History returns the newest MaxHistory, never more. A
// crash within the moves leaves a chunk's number unused, which readers
// skip. Readers hold the guard shared, so that they never see a move half
// done. A key with a history keeps its directory through Prune, until
// ForgetHistory (prune --history).

const (
	historyFile   = "history"
	historyChunk  = 50
	historyChunks = store.MaxHistory/historyChunk + 1 // full older chunks, and the newest
)

// historyList is the content of a chunk.
type historyList struct {
	Schema   int             `json:"schema"`
	Holdings []store.Holding `json:"holdings"`
}

// chunkName is the name of chunk i: history, then history.1, ...
func chunkName(i int) string {
	if i == 0 {
		return historyFile
	}
	return historyFile + "." + strconv.Itoa(i)
}

// isHistoryName reports whether name is one of a key's history chunks.
func isHistoryName(name string) bool {
	for i := range historyChunks {
		if name == chunkName(i) {
			return true
		}
	}
	return false
}

// readChunk reads a chunk; a missing one is empty.
func readChunk(kd dir, name string) ([]store.Holding, error) {
	var l historyList
	err := readJSONFile(kd, name, &l, &l.Schema)
	return l.Holdings, err
}

func writeChunk(kd dir, name string, hs []store.Holding) error {
	return writeJSONFile(kd, name, historyList{Schema: schemaVersion, Holdings: hs})
}

// readHistory reads the newest limit (at most MaxHistory) of kd's ended
// holdings, oldest first: only the chunks that hold them.
func readHistory(kd dir, limit int) ([]store.Holding, error) {
	var chunks [][]store.Holding // newest first
	n := 0
	for i := 0; i < historyChunks && n < limit; i++ {
		hs, err := readChunk(kd, chunkName(i))
		if err != nil {
			return nil, err
		}
		chunks, n = append(chunks, hs), n+len(hs)
	}
	all := make([]store.Holding, 0, n)
	for i := len(chunks) - 1; i >= 0; i-- {
		all = append(all, chunks[i]...)
	}
	if len(all) > limit {
		all = all[len(all)-limit:]
	}
	return all, nil
}

// holdingOf is the holding the record's holder has with fence.
func holdingOf(h *holderRecord, fence uint64) store.Holding {
	_, _, slot := h.kind()
	return store.Holding{Fence: fence, Slot: slot, Name: h.Name, PID: h.PID, Host: h.Host, Reason: h.Reason, Start: h.Acquired.UTC()}.Bounded()
}

// historyEnded adds the holding of the record's holder h, with fence,
// ended at end as e says; the caller holds kd's guard exclusively.
func historyEnded(kd dir, h *holderRecord, fence uint64, end time.Time, e store.Ending) error {
	x := holdingOf(h, fence)
	x.End, x.Ending = end, &e
	if e.How == store.EndUnknown {
		x.End = time.Time{} // when it died is not known
	}
	cur, err := readChunk(kd, historyFile)
	if err != nil {
		return err
	}
	if len(cur) >= historyChunk {
		if err := rotateHistory(kd); err != nil {
			return err
		}
		cur = nil
	}
	return writeChunk(kd, historyFile, append(cur, x))
}

// rotateHistory moves every chunk one further, dropping the oldest.
func rotateHistory(kd dir) error {
	if err := unix.Unlinkat(kd.FD, chunkName(historyChunks-1), 0); err != nil && err != unix.ENOENT {
		return fmt.Errorf("filestore: remove %s: %w", kd.Join(chunkName(historyChunks-1)), err)
	}
	for i := historyChunks - 2; i >= 0; i-- {
		if err := unix.Renameat(kd.FD, chunkName(i), kd.FD, chunkName(i+1)); err != nil && err != unix.ENOENT {
			return fmt.Errorf("filestore: rename %s: %w", kd.Join(chunkName(i)), err)
		}
	}
	return nil
}

// History reads key's holdings (see store.Store), under its guard shared.
func (s *Store) History(ctx context.Context, key string, limit int) ([]store.Holding, error) {
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
	g, _, err := s.lockGuardRead(ctx, kd)
	switch {
	case errors.Is(err, fs.ErrNotExist): // never mutated
		return nil, nil
	case err != nil:
		return nil, err
	}
	if g >= 0 {
		defer unix.Close(g)
	}
	if limit <= 0 || limit > store.MaxHistory {
		limit = store.MaxHistory
	}
	hs, err := readHistory(kd, limit)
	if err != nil {
		return nil, err
	}
	// The holdings that last are the slots' holders'. A record that
	// cannot be read (status says why) leaves the others to show.
	sds, err := openSlots(kd)
	if err != nil {
		return hs, nil
	}
	defer closeSlots(sds)
	var lasting []store.Holding
	for _, sd := range sds {
		if rec, _, err := readRecord(sd.d); err == nil && rec.held() {
			lasting = append(lasting, holdingOf(rec.Holder, rec.Fence))
		}
	}
	// Holdings are written as they end, which for holders beside each
	// other (M1, M2) is not the order they started in: oldest first is
	// by fence, which rises with every take of the key.
	hs = append(hs, lasting...)
	slices.SortStableFunc(hs, func(a, b store.Holding) int { return cmp.Compare(a.Fence, b.Fence) })
	return hs[max(0, len(hs)-limit):], nil
}

// ForgetHistory drops a free key's history (see store.Store), under its
// guard held exclusively.
func (s *Store) ForgetHistory(ctx context.Context, key string) (bool, error) {
	kd, g, ok, err := s.lockExisting(ctx, key, "prune --history")
	if !ok {
		return false, err
	}
	defer kd.Close()
	defer unix.Close(g)
	sds, err := openSlots(kd)
	if err != nil {
		return false, err
	}
	defer closeSlots(sds)
	for _, sd := range sds {
		if held, err := sd.d.ProbeLock(liveFile); err != nil || held {
			return false, err
		}
	}
	dropped := false
	for i := range historyChunks {
		err := unix.Unlinkat(kd.FD, chunkName(i), 0)
		if err != nil && err != unix.ENOENT {
			return dropped, fmt.Errorf("filestore: remove %s: %w", kd.Join(chunkName(i)), err)
		}
		dropped = dropped || err == nil
	}
	return dropped, nil
}
