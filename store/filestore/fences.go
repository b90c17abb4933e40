package filestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"

	"github.com/fencerun/fencerun/store"
)

// Fences are handed out from durable reservations, so that most
// acquisitions need no fsync at all (P1, P2).
//
// A key's `fences` file records the highest fence reserved, the lowest
// fence the next holder may get, and the boot it was written in:
// {"schema":1,"reserved":R,"from":F,"boot":"<boot_id>"}. It is written
// durably (fsync, rename, directory fsync) before any fence from F up to R
// is handed out, a block of fenceBlock at a time. Within one boot the
// record's fence is exact even if never fsynced: a process that dies loses
// nothing the kernel already has. Only a kernel crash or power cut loses
// unsynced writes, and that is always followed by a new boot: then the next
// fence is R+1, above every fence handed out before the crash, and F
// records it, so that an acquirer that dies before writing its record does
// not let the stale record's fence count again. Whoever clears a key's
// state (release --force of corrupt state) first raises the reservation
// with no boot, which has the same effect. So fences strictly increase
// across process crashes, a crash between writing and renaming, reboots and
// repairs (S4), and skip at most a block per reboot.
//
// What this does not cover: a file system that loses written-back page
// cache within one boot (a writeback error after which the kernel drops the
// page, a device pulled and re-attached without a reboot).
const (
	fencesFile = "fences"
	fenceBlock = 64
)

type reservation struct {
	Schema   int    `json:"schema"`
	Reserved uint64 `json:"reserved"`
	From     uint64 `json:"from,omitempty"`
	Boot     string `json:"boot"`
}

// maxFence bounds fences and reservations: a record or reservation above
// it is corrupt, so that adding a block can never wrap around.
const maxFence = 1 << 63

// nextFence returns the fence of the next holder of the key whose record
// is rec, first making a new reservation durable when the current one is
// used up or from another boot. The caller holds the guard exclusively.
func nextFence(kd dir, rec record) (uint64, error) {
	res, err := readReservation(kd)
	if err != nil {
		return 0, err
	}
	boot := bootID()
	sameBoot := boot != "" && res.Boot == boot
	fence := max(rec.Fence+1, res.From)
	if !sameBoot {
		// Writes of the boot that made the reservation may be lost: any
		// fence up to it may have been handed out.
		fence = max(fence, res.Reserved+1)
	}
	if !sameBoot || fence > res.Reserved {
		if err := reserve(kd, reservation{Reserved: fence + fenceBlock - 1, From: fence, Boot: boot}); err != nil {
			return 0, err
		}
	}
	return fence, nil
}

// reserve writes r durably.
func reserve(kd dir, r reservation) error {
	r.Schema = schemaVersion
	data, _ := json.Marshal(r)
	_, err := writeAtomic(kd, fencesFile, append(data, '\n'), writeOpts{durable: true})
	return err
}

// readReservation reads a key's fences file; none is a zero reservation.
func readReservation(kd dir) (reservation, error) {
	data, err := readFile(kd, fencesFile)
	if errors.Is(err, fs.ErrNotExist) {
		return reservation{Schema: schemaVersion}, nil
	}
	if err != nil {
		return reservation{}, err
	}
	path := kd.join(fencesFile)
	var r reservation
	if err := json.Unmarshal(data, &r); err != nil {
		return reservation{}, fmt.Errorf("%w: %s: %s", store.ErrCorrupt, path, jsonProblem(err))
	}
	if r.Schema != schemaVersion {
		return reservation{}, fmt.Errorf("%w: %s has schema version %d; this fencerun reads version %d", store.ErrCorrupt, path, r.Schema, schemaVersion)
	}
	if r.Reserved > maxFence || r.From > maxFence {
		return reservation{}, fmt.Errorf("%w: %s reserves fences beyond %d", store.ErrCorrupt, path, uint64(maxFence))
	}
	return r, nil
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
