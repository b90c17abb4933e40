package filestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// Fences come from one counter per store, so that a key's directory can be
// removed (Prune) without the key's next fence ever going back: every
// fence is above every fence the store ever handed out, for any key (S4).
//
// Two files in the root, both slotted (slots.go):
//
//   - fences, the durable reservation {"schema":1,"reserved":R,"boot":B}:
//     no fence above R is handed out before a reservation covering it is
//     on disk (written in place and fsynced; made whole by writeAtomic,
//     durably, the first time). It is written once per fenceBlock
//     acquisitions in the store, and once per boot.
//   - fence-next, the counter {"schema":1,"next":N,"reserved":R,"boot":B}:
//     the next fence to hand out within boot B, never fsynced. It is also
//     the store's fence lock: flock(LOCK_EX) on it around every read and
//     write of either file. It is made by O_CREAT and only ever written in
//     place, so the lock is always on the one file.
//
// Within one boot the counter is exact even unsynced: a process that dies
// loses nothing the kernel already has. Only a kernel crash or power cut
// loses unsynced writes, and that is always followed by a new boot, whose
// counter (another boot's, or torn, or empty) is not trusted: the next
// fence is then the durable R+1, above every fence handed out before the
// crash. A counter that cannot be read is never an error, only a new
// reservation. A reservation that cannot be read fails closed (S6), naming
// the file; Revoke (release --force) restarts it above anything this host
// can have counted (repairFences).
//
// What this does not cover: a file system that loses written-back page
// cache within one boot (a writeback error after which the kernel drops the
// page, a device pulled and re-attached without a reboot).
const (
	fencesFile  = "fences"
	counterFile = "fence-next"
	fenceBlock  = 64
)

type reservation struct {
	Schema   int    `json:"schema"`
	Reserved uint64 `json:"reserved"`
	Boot     string `json:"boot"`
}

type counter struct {
	Schema   int    `json:"schema"`
	Next     uint64 `json:"next"`
	Reserved uint64 `json:"reserved"`
	Boot     string `json:"boot"`
}

// maxFence bounds fences and reservations: a record or reservation above
// it is corrupt, so that adding a block can never wrap around.
const maxFence = 1 << 63

// nextFence hands out the store's next fence, at least atLeast (a key's
// record from an earlier fencerun may carry a fence of its own), making a
// new reservation durable first when the counter's is used up or was not
// made in this boot.
func (s *Store) nextFence(atLeast uint64) (uint64, error) {
	s.mu.RLock() // keeps s.top open
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	top := s.top
	fd, c, cur, err := lockCounter(top)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	boot := bootID()
	fence := atLeast
	trusted := boot != "" && c.Boot == boot
	if trusted {
		fence = max(fence, c.Next)
	}
	if !trusted || fence > c.Reserved {
		res, rcur, err := readReservation(top)
		if err != nil {
			return 0, err
		}
		fence = max(fence, res.Reserved+1)
		if fence > maxFence-fenceBlock {
			return 0, fmt.Errorf("%w: %s: fences are used up", store.ErrCorrupt, top.join(fencesFile))
		}
		c.Reserved = fence + fenceBlock - 1
		if err := reserve(top, rcur, reservation{Reserved: c.Reserved, Boot: boot}); err != nil {
			return 0, err
		}
	}
	c.Next, c.Boot = fence+1, boot
	if err := writeCounter(fd, top, cur, c); err != nil {
		return 0, err
	}
	return fence, nil
}

// lockCounter opens the counter, takes the store's fence lock and reads it.
// A counter that cannot be read is a zero one: it only costs a reservation.
func lockCounter(top dir) (int, counter, slotted, error) {
	fd, err := openFile(top, counterFile, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return -1, counter{}, slotted{}, err
	}
	if err := flockWait(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return -1, counter{}, slotted{}, fmt.Errorf("filestore: lock %s: %w", top.join(counterFile), err)
	}
	var c counter
	raw, err := readSized(fd, top.join(counterFile), 2*minSlotSize)
	if err != nil {
		unix.Close(fd)
		return -1, counter{}, slotted{}, err
	}
	cur, err := parseSlotted(raw, top.join(counterFile))
	if err != nil || cur.size == 0 || json.Unmarshal(cur.data, &c) != nil || c.Schema != schemaVersion || c.Next > c.Reserved+1 {
		return fd, counter{}, slotted{}, nil
	}
	return fd, c, cur, nil
}

// writeCounter writes c in place, not durably: the counter is never
// renamed, so that its lock stays on the one file.
func writeCounter(fd int, top dir, cur slotted, c counter) error {
	c.Schema = schemaVersion
	data, _ := json.Marshal(c)
	var b []byte
	var off int64
	if cur.size == 0 {
		f, err := wholeFile(data, 2)
		if err != nil {
			return err
		}
		b = f
	} else {
		slot := 1 - cur.slot
		b, off = encodeSlot(data, cur.seq+1, cur.size), int64(slot*cur.size)
	}
	for len(b) > 0 {
		n, err := slotWrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("filestore: write %s: %w", top.join(counterFile), err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// reserve writes r durably over cur, what readReservation returned under
// the fence lock.
func reserve(top dir, cur slotted, r reservation) error {
	r.Schema = schemaVersion
	data, _ := json.Marshal(r)
	return writeSlotted(top, fencesFile, cur, data, true)
}

// readReservation reads the store's durable reservation; none is a zero
// reservation.
func readReservation(top dir) (reservation, slotted, error) {
	cur, err := readSlotted(top, fencesFile)
	if errors.Is(err, fs.ErrNotExist) {
		return reservation{Schema: schemaVersion}, slotted{}, nil
	}
	if err != nil {
		return reservation{}, cur, err
	}
	path := top.join(fencesFile)
	var r reservation
	if err := json.Unmarshal(cur.data, &r); err != nil {
		return reservation{}, cur, fmt.Errorf("%w: %s: %s", store.ErrCorrupt, path, jsonProblem(err))
	}
	if r.Schema != schemaVersion {
		return reservation{}, cur, fmt.Errorf("%w: %s has schema version %d; this fencerun reads version %d", store.ErrCorrupt, path, r.Schema, schemaVersion)
	}
	if r.Reserved > maxFence {
		return reservation{}, cur, fmt.Errorf("%w: %s reserves fences beyond %d", store.ErrCorrupt, path, uint64(maxFence))
	}
	return r, cur, nil
}

// repairFences restarts a reservation that cannot be read above every
// fence this host can have counted: the larger of any number still
// readable in it and the current Unix time in microseconds, which no
// counter that grows by one per acquisition reaches. It reports whether
// there was anything to repair.
func (s *Store) repairFences(floorHint uint64) (bool, error) {
	s.mu.RLock() // keeps s.top open
	defer s.mu.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	top := s.top
	fd, _, _, err := lockCounter(top)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	_, cur, cause := readReservation(top)
	if cause == nil {
		return false, nil
	}
	if !errors.Is(cause, store.ErrCorrupt) {
		return false, cause
	}
	if err := clearJunk(top, fencesFile); err != nil && !errors.Is(err, errNoJunk) {
		return false, err
	}
	floor := min(max(salvage(cur.raw, "reserved"), floorHint, uint64(s.now().UnixMicro())), maxFence-fenceBlock)
	if err := reserve(top, slotted{}, reservation{Reserved: floor}); err != nil {
		return false, err
	}
	// The counter may still be this boot's, below the new floor.
	if err := writeCounter(fd, top, slotted{}, counter{}); err != nil {
		return false, err
	}
	s.log.Warn("cleared a corrupt fence reservation", "path", top.join(fencesFile), "cause", cause, "fences_from", floor+1)
	return true, nil
}

// bootID identifies this boot of the kernel; "" if it cannot be read,
// which makes every acquisition reserve durably.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})
