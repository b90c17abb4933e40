package resident

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// S6 for the role's fence files: whatever stands where the reservation or
// the counter belongs and cannot be read stops every acquisition, naming
// the file and saying that release --force clears it; release --resident
// --force (Revoke) does clear it, and the fences go on above every one
// handed out before (S4).
//
// Not parallel: a fork by a parallel test between Release and the next
// Acquire can hold a copy of the role's claim socket until its exec, and
// the next Acquire then sees the claim held.
func TestReleaseForceClearsUnreadableFenceFiles(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		damage     func(path string) error
	}{
		{"garbage reservation", ".resident.fence", func(p string) error { return os.WriteFile(p, []byte("garbage"), 0o600) }},
		{"truncated reservation", ".resident.fence", func(p string) error { return os.Truncate(p, 100) }},
		{"fifo for reservation", ".resident.fence", func(p string) error { os.Remove(p); return unix.Mkfifo(p, 0o600) }},
		{"directory for reservation", ".resident.fence", func(p string) error { os.Remove(p); return os.Mkdir(p, 0o700) }},
		{"fifo for counter", ".resident.fence-next", func(p string) error { os.Remove(p); return unix.Mkfifo(p, 0o600) }},
		{"directory for counter", ".resident.fence-next", func(p string) error { os.Remove(p); return os.Mkdir(p, 0o700) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storePath := t.TempDir() + "/app.db"
			var last uint64
			for range 3 {
				last = takeRole(t, storePath)
			}
			// The counter gone, the reservation is read at the next take.
			os.Remove(storePath + ".resident.fence-next")
			path := storePath + tc.file
			if err := tc.damage(path); err != nil {
				t.Fatal(err)
			}
			r, ref, err := Acquire(context.Background(), storePath, Claim{})
			if r != nil || ref != nil || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) ||
				!strings.Contains(err.Error(), "release --resident "+storePath+" --force") {
				t.Fatalf("Acquire = %v, %v, %v; want ErrCorrupt naming %s and how to clear it", r, ref, err, path)
			}
			had, repaired, err := Revoke(storePath)
			if err != nil || had || repaired == nil || !errors.Is(repaired.Cause, store.ErrCorrupt) || !strings.Contains(repaired.Cause.Error(), path) {
				t.Fatalf("Revoke = %v, %+v, %v; want the unreadable %s cleared and named", had, repaired, err, path)
			}
			if got := takeRole(t, storePath); got <= last {
				t.Fatalf("fence %d after the repair, not above %d", got, last)
			}
			if had, repaired, err := Revoke(storePath); had || repaired != nil || err != nil {
				t.Fatalf("Revoke of a free, readable role = %v, %+v, %v; want nothing done", had, repaired, err)
			}
		})
	}
}

// A dead holder's payload whose fence is beyond any fence the allocator
// hands out (fences.Max) is corrupt, as a file backend record's is: the
// next holder must not start with a fence below it (2^64-1 + 1 wraps to
// 0), and release --force clears it.
func TestAPayloadFenceBeyondTheLimitIsCorrupt(t *testing.T) {
	// Just under fences.Max too: no fence would be left above it.
	for _, fence := range []uint64{1<<64 - 1, 1<<64 - 2, 1<<63 + 1, 1 << 63, 1<<63 - 8, 1<<63 - 2*64 + 1} {
		t.Run(fmt.Sprint(fence), func(t *testing.T) {
			storePath := t.TempDir() + "/app.db"
			last := takeRole(t, storePath)
			lock := storePath + ".resident.lock"
			content := fmt.Sprintf(`{"schema":1,"pid":%d,"host":%q,"surface":"x","acquired_at":"2026-01-01T00:00:00Z","store":%q,"fence":%d}`,
				deadPID(t), hostname(), storePath, fence)
			if err := os.WriteFile(lock, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			r, ref, err := Acquire(context.Background(), storePath, Claim{})
			if r != nil {
				r.Release(context.Background())
				t.Fatalf("Acquire over a payload with fence %d started a holder with fence %d", fence, r.Fence())
			}
			if ref != nil || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), lock) {
				t.Fatalf("Acquire = %v, %v; want ErrCorrupt naming %s", ref, err, lock)
			}
			if st := mustStatus(t, storePath); st.State != store.Corrupt {
				t.Fatalf("status %+v, want corrupt", st)
			}
			if had, _, err := Revoke(storePath); !had || err != nil {
				t.Fatalf("Revoke = %v, %v", had, err)
			}
			if got := takeRole(t, storePath); got <= last {
				t.Fatalf("fence %d after the repair, not above %d", got, last)
			}
		})
	}
}
