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
// A key's `fences` file records the highest fence reserved and the boot it
// was reserved in: {"schema":1,"reserved":R,"boot":"<boot_id>"}. It is
// written durably (fsync, rename, directory fsync) before any fence up to R
// is handed out, a block of fenceBlock at a time. Within one boot the
// record's fence is exact even if never fsynced: a process that dies loses
// nothing the kernel already has. Only a kernel crash or power cut loses
// unsynced writes, and that is always followed by a new boot: then the next
// fence is R+1, above every fence handed out before the crash. So fences
// strictly increase across process crashes, a crash between writing and
// renaming, and reboots (S4), and skip at most a block per reboot.
const (
	fencesFile = "fences"
	fenceBlock = 64
)

type reservation struct {
	Schema   int    `json:"schema"`
	Reserved uint64 `json:"reserved"`
	Boot     string `json:"boot"`
}

// nextFence returns the fence of the next holder of the key whose record
// is rec, first making a new reservation durable when the current one is
// used up or from another boot. The caller holds the guard exclusively.
func nextFence(kd dir, rec record) (uint64, error) {
	res, err := readReservation(kd)
	if err != nil {
		return 0, err
	}
	boot := bootID()
	base := rec.Fence
	sameBoot := boot != "" && res.Boot == boot
	if !sameBoot {
		// Writes of the boot that made the reservation may be lost: any
		// fence up to it may have been handed out.
		base = max(base, res.Reserved)
	}
	fence := base + 1
	if !sameBoot || fence > res.Reserved {
		next := reservation{Schema: schemaVersion, Reserved: fence + fenceBlock - 1, Boot: boot}
		data, _ := json.Marshal(next)
		if _, err := writeAtomic(kd, fencesFile, append(data, '\n'), writeOpts{durable: true}); err != nil {
			return 0, err
		}
	}
	return fence, nil
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
