package filestore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// A holder keeps the key's guard and record open for its renewals
// (Lease.update). A guard or record that is no longer the file the name
// guard or lease in the key's directory names (unlinked, renamed away,
// replaced by another file, even one with the same bytes) would take a
// renewal's lock or write where nobody else looks: the renewal must lose
// the lease instead, and never write.
func TestRenewalLosesTheLeaseWhenItsGuardOrRecordIsNotTheNamedOne(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
		change           func(t *testing.T, path string)
	}{
		{"guard unlinked", guardFile, "guard lock file", func(t *testing.T, path string) { remove(t, path) }},
		{"guard renamed away", guardFile, "guard lock file", func(t *testing.T, path string) { rename(t, path, path+".old") }},
		{"guard replaced", guardFile, "guard lock file", replaceByCopy},
		{"guard unlinked and made again", guardFile, "guard lock file", makeAgain},
		{"record unlinked", leaseFile, "lease record", func(t *testing.T, path string) { remove(t, path) }},
		{"record replaced by a copy", leaseFile, "lease record", replaceByCopy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root := newStore(t)
			l := mustAcquire(t, s, "k", claim("a"))
			defer mustRelease(t, l)
			// A renewal first, so that both files are open and kept.
			if _, err := l.Renew(t.Context()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(keyPath(root, "k"), tc.file)
			tc.change(t, path)
			record := filepath.Join(keyPath(root, "k"), leaseFile)
			before, _ := os.ReadFile(record)
			_, err := l.Renew(t.Context())
			if !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("renewal after %s: %v; want ErrLost naming the %s", tc.name, err, tc.want)
			}
			if after, _ := os.ReadFile(record); string(after) != string(before) {
				t.Errorf("the lost renewal wrote the record")
			}
			if _, err := l.Check(t.Context()); !errors.Is(err, store.ErrLost) {
				t.Errorf("Check after %s: %v; want ErrLost", tc.name, err)
			}
		})
	}
}

// The same before the lease's first renewal: the guard and record are
// kept open from the take, so that a file unlinked then cannot be freed
// and its inode number given to the next file made under its name (ext4
// does that at once), which would pass for the file the lease was taken
// under.
func TestFirstRenewalChecksTheFilesTheLeaseWasTakenUnder(t *testing.T) {
	for _, file := range []string{guardFile, leaseFile} {
		t.Run(file, func(t *testing.T) {
			s, root := newStore(t)
			l := mustAcquire(t, s, "k", claim("a"))
			defer mustRelease(t, l)
			makeAgain(t, filepath.Join(keyPath(root, "k"), file))
			if _, err := l.Renew(t.Context()); !errors.Is(err, store.ErrLost) {
				t.Fatalf("first renewal after %s was replaced: %v; want ErrLost", file, err)
			}
		})
	}
}

// A renewal while someone else holds the guard (a reader, an acquirer,
// release --force) waits for it, as it did before the guard was kept open,
// and goes on once it is free; a revocation made meanwhile loses the lease.
func TestRenewalWaitsForTheGuardHeldElsewhere(t *testing.T) {
	s, root := newStore(t)
	l := mustAcquire(t, s, "k", claim("a"))
	defer mustRelease(t, l)
	if _, err := l.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	guard := func() int {
		fd, err := unix.Open(filepath.Join(keyPath(root, "k"), guardFile), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	fd := guard()
	done := make(chan error, 1)
	go func() { _, err := l.Renew(t.Context()); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a renewal went on while the guard was held elsewhere: %v", err)
	case <-time.After(50 * time.Millisecond): // it waits, as long as the guard is held
	}
	unix.Close(fd)
	if err := testsupport.Recv(t, done, "the renewal once the guard is free"); err != nil {
		t.Fatal(err)
	}

	// Held again while a revocation is written: the renewal that waited
	// finds the record revoked and writes nothing.
	fd = guard()
	go func() { _, err := l.Renew(t.Context()); done <- err }()
	revoked := make(chan error, 1)
	go func() { _, err := s.Revoke(t.Context(), "k", store.Which{}); revoked <- err }()
	unix.Close(fd)
	if err := testsupport.Recv(t, revoked, "the revocation"); err != nil {
		t.Fatal(err)
	}
	if err := testsupport.Recv(t, done, "the renewal"); err != nil && !errors.Is(err, store.ErrLost) {
		t.Fatal(err)
	}
	if _, err := l.Renew(t.Context()); !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("renewal after the revocation: %v; want ErrLost saying revoked", err)
	}
}

// A record this lease itself rewrites whole (it outgrew its slot) is a
// new file under the name: the lease keeps that one, and goes on renewing.
func TestARecordTheLeaseRewroteWholeIsKept(t *testing.T) {
	s, root := newStore(t)
	record := filepath.Join(keyPath(root, "k"), leaseFile)
	// A name and reason that leave the record just short of its slot: a
	// tick's timestamp then makes it outgrow it. A control character in
	// the reason is six bytes of JSON (\u0001).
	n := 1
	for {
		c := claim(strings.Repeat("n", min(n, 1000)))
		if rest := max(n-1000, 0); rest > 0 {
			c.Reason = strings.Repeat("\x01", rest/6) + strings.Repeat("r", rest%6)
		}
		l := mustAcquire(t, s, "k", c)
		data, err := os.ReadFile(record)
		if err != nil {
			t.Fatal(err)
		}
		f, err := statefs.ParseSlotted(data, record)
		if err != nil {
			t.Fatal(err)
		}
		room := f.Size - statefs.SlotHeader - len(f.Data)
		if room < 20 {
			var before unix.Stat_t
			if err := unix.Stat(record, &before); err != nil {
				t.Fatal(err)
			}
			if err := l.Tick(t.Context(), time.Now()); err != nil {
				t.Fatal(err)
			}
			var after unix.Stat_t
			if err := unix.Stat(record, &after); err != nil {
				t.Fatal(err)
			}
			if after.Ino == before.Ino || after.Size <= before.Size {
				t.Fatalf("the tick did not rewrite the record whole (inode %d -> %d, size %d -> %d)", before.Ino, after.Ino, before.Size, after.Size)
			}
			for range 3 {
				if _, err := l.Renew(t.Context()); err != nil {
					t.Fatalf("renewal after the lease rewrote its record whole: %v", err)
				}
			}
			if st := mustStatus(t, s, "k"); st.State != store.Held || st.Holder.LastTick.IsZero() {
				t.Fatalf("status: %+v", st)
			}
			mustRelease(t, l)
			return
		}
		mustRelease(t, l)
		n += room - 10
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// makeAgain unlinks path and makes an empty file under its name, as the
// next acquirer makes a missing guard.
func makeAgain(t *testing.T, path string) {
	t.Helper()
	remove(t, path)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceByCopy renames a copy of path, byte for byte, over it.
func replaceByCopy(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".copy", data, 0o600); err != nil {
		t.Fatal(err)
	}
	rename(t, path+".copy", path)
}

// With a cgroup the command's pid is written by the next write: at a TTL
// of up to 3 s the first renewal (within a second), with no write of its
// own; at a longer TTL, within commandPIDDelay by a write of its own.
func TestTheCommandsPidRidesOnTheNextWrite(t *testing.T) {
	for _, ttl := range []time.Duration{3 * time.Second, time.Minute} {
		t.Run(ttl.String(), func(t *testing.T) {
			s, _ := newStore(t)
			c := claim("a")
			c.TTL, c.Cgroup = ttl, "/sys/fs/cgroup/fencerun-test"
			l := mustAcquire(t, s, "k", c)
			defer mustRelease(t, l)
			pid := store.ProcessID{ID: os.Getpid()}
			if err := l.SetCommand(t.Context(), pid, pid); err != nil {
				t.Fatal(err)
			}
			recorded := func() bool {
				st := mustStatus(t, s, "k")
				return st.Holder != nil && st.Holder.CommandPID == os.Getpid()
			}
			if ttl/3 > time.Second {
				testsupport.WaitFor(t, "the command's pid, written by SetCommand's timer", recorded)
				return
			}
			// Nothing else writes before the first renewal.
			time.Sleep(2 * commandPIDDelay)
			if recorded() {
				t.Fatal("the command's pid was written before the first renewal")
			}
			if _, err := l.Renew(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !recorded() {
				t.Fatal("the first renewal did not write the command's pid")
			}
		})
	}
}
