package statefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// The fence counter, the one fence allocator of fencerun's state on this
// host: the file backend's store-wide counter (store/filestore) and the
// resident role's counter of one store file (resident) are each a
// Counter, two files in a state directory.
//
//   - The reservation file, {"schema":1,"reserved":R,"boot":B}: no fence
//     above R is handed out before a reservation covering it is on disk
//     (written in place into two checksummed slots and fsynced; made whole
//     by WriteAtomic, durably, the first time). It is written once
//     per FenceBlock fences, and once per boot.
//   - The counter file, {"schema":1,"next":N,"reserved":R,"boot":B}: the
//     next fence to hand out within boot B, never fsynced. It is also the
//     fence lock: flock(LOCK_EX) on it around every read and write of
//     either file. It is made by O_CREAT and only ever written in place,
//     so the lock is always on the one file.
//
// What it guarantees: every fence Take returns is above every fence it
// returned before from the same files (S4), across process deaths at any
// point (a SIGKILL between the reservation and the fence's use costs a
// fence, never repeats one), kernel crashes, power cuts and reboots.
// Within one boot the counter is exact even unsynced: a process that dies
// loses nothing the kernel already has, so consecutive fences are
// consecutive numbers. Only a kernel crash or power cut loses unsynced
// writes, and that is always followed by a new boot, whose counter
// (another boot's, or torn, or empty) is not trusted: the next fence is
// then the durable R+1, above every fence handed out before the crash. A
// counter that cannot be read is never an error, only a new reservation.
// A reservation that cannot be read fails closed (store.ErrCorrupt naming
// the file); Repair restarts it above anything this host can have counted.
// So does a FIFO, directory or other non-regular file where the counter
// belongs, on which Take fails before its lock; Repair removes it.
//
// A reservation file in an earlier resident role's format,
// {"schema":1,"fence":N} (the last fence it handed out, written by
// rename), is read as a reservation of N: the next fence is above it, and
// the next reservation replaces it with a slotted file.
//
// What it does not cover: a file system that loses written-back page
// cache within one boot (a writeback error after which the kernel drops
// the page, a device pulled and re-attached without a reboot); anyone who
// edits or deletes the files by hand (deleting both restarts the fences).

// FenceBlock is how many fences one reservation covers.
const FenceBlock = 64

// FenceMax bounds fences and reservations: a record or reservation above it is
// corrupt, so that adding a block can never wrap around.
const FenceMax = 1 << 63

// fenceSchema is the version of both files' content.
const fenceSchema = 1

// Counter is one store's fence counter: the files Reservation and Lock in
// Dir, open for as long as the Counter is used.
type Counter struct {
	Dir         Dir
	Reservation string // the durable reservation
	Lock        string // the counter, and the fence lock
}

type reservation struct {
	Schema   int    `json:"schema"`
	Reserved uint64 `json:"reserved"`
	Boot     string `json:"boot"`
	// Fence is an earlier resident role's last fence: a reservation of it.
	Fence uint64 `json:"fence,omitempty"`
}

type counter struct {
	Schema   int    `json:"schema"`
	Next     uint64 `json:"next"`
	Reserved uint64 `json:"reserved"`
	Boot     string `json:"boot"`
}

// Take hands out the next fence, at least atLeast (a record from an
// earlier fencerun may carry a fence of its own), making a new reservation
// durable first when the counter's is used up or was not made in this
// boot.
func (c Counter) Take(atLeast uint64) (uint64, error) {
	fd, n, cur, err := c.lock()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	boot := bootID()
	fence, covered := n.plan(atLeast, boot)
	if !covered {
		res, rcur, err := c.read()
		if err != nil {
			return 0, err
		}
		fence = max(fence, res.Reserved+1)
		if fence > FenceMax-FenceBlock {
			return 0, c.usedUp()
		}
		n.Reserved = fence + FenceBlock - 1
		if err := c.reserve(rcur, reservation{Reserved: n.Reserved, Boot: boot}); err != nil {
			return 0, err
		}
	}
	n.Next, n.Boot = fence+1, boot
	if err := c.writeCounter(fd, cur, n); err != nil {
		return 0, err
	}
	return fence, nil
}

// RestartFloor is the least fence to take from c when a live holder was
// proven (its claim) whose files are gone: where c has no reservation file
// (moved away or deleted with the rest), the Unix time now in
// microseconds, which no counter that grows by one per acquisition
// reaches (as Repair's floor), so that a restarted counter never hands out
// a fence that holder's had passed (S4); otherwise 0, for c still counts.
func (c Counter) RestartFloor(now time.Time) uint64 {
	if _, cur, err := c.read(); err != nil || cur.Exists {
		return 0
	}
	return min(uint64(now.UnixMicro()), FenceMax-2*FenceBlock)
}

// plan is the fence Take(atLeast) hands out from the counter n, and
// whether n's reservation covers it; if not, a new reservation must, with
// the fence at least the durable one's next.
func (n counter) plan(atLeast uint64, boot string) (uint64, bool) {
	if boot == "" || n.Boot != boot {
		return atLeast, false
	}
	fence := max(atLeast, n.Next)
	return fence, fence <= n.Reserved
}

// UsedUpAt reports whether Take(atLeast) would fail for want of fences
// (a record's fence near FenceMax asks for one above it), without changing
// anything but creating the counter. It is false when the reservation
// cannot be read: Problem names that.
func (c Counter) UsedUpAt(atLeast uint64) (bool, error) {
	fd, n, _, err := c.lock()
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	fence, covered := n.plan(atLeast, bootID())
	if covered {
		return false, nil
	}
	res, _, err := c.read()
	if err != nil {
		return false, nil
	}
	return max(fence, res.Reserved+1) > FenceMax-FenceBlock, nil
}

// lock opens the counter, takes the fence lock and reads it. A counter
// that cannot be read is a zero one: it only costs a reservation.
func (c Counter) lock() (int, counter, Slotted, error) {
	fd, err := c.Dir.OpenFile(c.Lock, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return -1, counter{}, Slotted{}, err
	}
	if err := FlockWait(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return -1, counter{}, Slotted{}, fmt.Errorf("lock %s: %w", c.Dir.Join(c.Lock), err)
	}
	var n counter
	raw, err := ReadFD(fd, c.Dir.Join(c.Lock))
	if err != nil {
		unix.Close(fd)
		return -1, counter{}, Slotted{}, err
	}
	cur, err := ParseSlotted(raw, c.Dir.Join(c.Lock))
	if err != nil || cur.Size == 0 || json.Unmarshal(cur.Data, &n) != nil || n.Schema != fenceSchema || n.Next > n.Reserved+1 {
		return fd, counter{}, Slotted{}, nil
	}
	return fd, n, cur, nil
}

// writeCounter writes n in place, not durably: the counter is never
// renamed, so that its lock stays on the one file.
func (c Counter) writeCounter(fd int, cur Slotted, n counter) error {
	n.Schema = fenceSchema
	data, _ := json.Marshal(n) // plain numbers and a string: cannot fail
	if cur.Size == 0 {
		whole, err := WholeSlots(data, 2)
		if err != nil {
			return err
		}
		return WriteSlotAt(fd, c.Dir.Join(c.Lock), whole, 0)
	}
	off, b := cur.Next(data)
	return WriteSlotAt(fd, c.Dir.Join(c.Lock), b, off)
}

// reserve writes r durably over cur, what read returned under the fence
// lock.
func (c Counter) reserve(cur Slotted, r reservation) error {
	r.Schema = fenceSchema
	data, _ := json.Marshal(r) // as the counter's
	return c.Dir.WriteSlotted(c.Reservation, cur, data, true)
}

// read reads the durable reservation; none is a zero reservation.
func (c Counter) read() (reservation, Slotted, error) {
	cur, err := c.Dir.ReadSlotted(c.Reservation)
	if errors.Is(err, fs.ErrNotExist) {
		return reservation{Schema: fenceSchema}, Slotted{}, nil
	}
	if err != nil {
		return reservation{}, cur, err
	}
	path := c.Dir.Join(c.Reservation)
	var r reservation
	if err := json.Unmarshal(cur.Data, &r); err != nil {
		return reservation{}, cur, fmt.Errorf("%w: %s: %s", store.ErrCorrupt, path, JSONProblem(err))
	}
	if r.Schema != fenceSchema {
		return reservation{}, cur, fmt.Errorf("%w: %s has schema version %d; this fencerun reads version %d", store.ErrCorrupt, path, r.Schema, fenceSchema)
	}
	r.Reserved = max(r.Reserved, r.Fence)
	if r.Reserved > FenceMax {
		return reservation{}, cur, fmt.Errorf("%w: %s reserves fences beyond %d", store.ErrCorrupt, path, uint64(FenceMax))
	}
	return r, cur, nil
}

// usedUp is Take's error for a reservation at or beyond FenceMax-FenceBlock: no
// fence is left to hand out above it. Only damage or a hand edit gets
// there (a counter that grows by one per acquisition does not), so
// Problem reports it and Repair restarts the reservation.
func (c Counter) usedUp() error {
	return fmt.Errorf("%w: %s: %w", store.ErrCorrupt, c.Dir.Join(c.Reservation), ErrUsedUp)
}

// ErrUsedUp is Take's error when no fence is left to hand out: the
// reservation is at FenceMax-FenceBlock, or atLeast is beyond it.
var ErrUsedUp = errors.New("fences are used up")

// readUsable is read, with a reservation that leaves no fence to hand
// out (usedUp) an error too.
func (c Counter) readUsable() (reservation, Slotted, error) {
	res, cur, err := c.read()
	if err == nil && res.Reserved >= FenceMax-FenceBlock {
		return res, cur, c.usedUp()
	}
	return res, cur, err
}

// salvageable is n if a fence or reservation this high can have been
// handed out with fences left above it, else 0: a number beyond
// FenceMax-2*FenceBlock in a damaged file is damage, not a count, and a floor from
// it would leave Repair's new reservation used up at once.
func salvageable(n uint64) uint64 {
	if n > FenceMax-2*FenceBlock {
		return 0
	}
	return n
}

// Repaired says what Repair did: the file it repaired (the reservation,
// or the counter when only the counter's place held junk), why it could
// not be used, and the first fence handed out from now.
type Repaired struct {
	Path  string
	Cause error
	From  uint64
}

// Problem is the error a Take would fail with on what stands in the
// files' places now, found without creating, locking or changing
// anything: a reservation that cannot be read, or something other than a
// regular file where the counter belongs. It is nil when Take can work.
func (c Counter) Problem() error {
	if _, _, err := c.readUsable(); err != nil {
		return err
	}
	fd, err := c.Dir.OpenFile(c.Lock, unix.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// Repair restarts a reservation that cannot be read above every fence
// this host can have counted: the larger of floorHint, any number still
// readable in it and the Unix time now in microseconds, which no counter
// that grows by one per acquisition reaches. What stands where the counter
// belongs and is no regular file (a FIFO, a directory), on which every
// Take fails before it locks, is removed first: nobody can hold the fence
// lock on it, and a new counter only costs a reservation. A symlink there
// stays refused. A reservation that leaves no fence to hand out (used
// up) is restarted too, and numbers beyond FenceMax-2*FenceBlock are not salvaged:
// a repaired reservation always has fences left. It returns nil when
// there was nothing to repair.
func (c Counter) Repair(floorHint uint64, now time.Time) (*Repaired, error) {
	junk := c.Dir.ClearJunk(c.Lock)
	if junk != nil && !errors.Is(junk, ErrNoJunk) {
		return nil, junk
	}
	fd, _, _, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	res, cur, cause := c.readUsable()
	if cause == nil {
		if junk == nil {
			// The counter starts afresh: the next Take reserves anew.
			path := c.Dir.Join(c.Lock)
			return &Repaired{Path: path, Cause: fmt.Errorf("%w: %s was not a regular file", store.ErrCorrupt, path), From: res.Reserved + 1}, nil
		}
		return nil, nil
	}
	if !errors.Is(cause, store.ErrCorrupt) {
		return nil, cause
	}
	if err := c.Dir.ClearJunk(c.Reservation); err != nil && !errors.Is(err, ErrNoJunk) {
		return nil, err
	}
	floor := min(max(salvageable(Salvage(cur.Raw, "reserved")), salvageable(Salvage(cur.Raw, "fence")),
		salvageable(floorHint), uint64(now.UnixMicro())), FenceMax-2*FenceBlock)
	if err := c.reserve(Slotted{}, reservation{Reserved: floor}); err != nil {
		return nil, err
	}
	// The counter may still be this boot's, below the new floor.
	if err := c.writeCounter(fd, Slotted{}, counter{}); err != nil {
		return nil, err
	}
	return &Repaired{Path: c.Dir.Join(c.Reservation), Cause: cause, From: floor + 1}, nil
}

// bootID identifies this boot of the kernel; "" if it cannot be read,
// which makes every Take reserve durably.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})
