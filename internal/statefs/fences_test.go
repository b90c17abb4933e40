package statefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// The allocator's own proofs, the same for every store that uses it (the
// file backend's root, a resident role's store directory). Each backend's
// tests prove the same through Acquire (store/filestore's fences_test.go,
// resident's fence_test.go).

func newCounter(t *testing.T) Counter {
	t.Helper()
	path := t.TempDir()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return Counter{Dir: Dir{FD: fd, Path: path}, Reservation: "fences", Lock: "fence-next"}
}

func take(t *testing.T, c Counter, atLeast uint64) uint64 {
	t.Helper()
	f, err := c.Take(atLeast)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func slotted(t *testing.T, c Counter, name, content string) {
	t.Helper()
	f, err := WholeSlots([]byte(content), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Dir.Join(name), f, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWithinABootFencesAreConsecutiveAcrossBlocks(t *testing.T) {
	c := newCounter(t)
	for want := uint64(1); want <= 3*FenceBlock; want++ {
		if got := take(t, c, 1); got != want {
			t.Fatalf("fence %d, want %d", got, want)
		}
	}
	res, _, err := c.read()
	if err != nil || res.Reserved < 3*FenceBlock || res.Boot != bootID() {
		t.Fatalf("reservation %+v (%v) does not cover fence %d in this boot", res, err, 3*FenceBlock)
	}
	if got := take(t, c, 1000); got != 1000 {
		t.Fatalf("at least 1000: fence %d", got)
	}
}

// After a reboot the crash may have lost counts up to the reservation:
// the next fence goes above it; and a first taker of the new boot that
// dies before using its fence costs one, never repeats one.
func TestAfterARebootFencesStartAboveTheReservation(t *testing.T) {
	c := newCounter(t)
	take(t, c, 1)
	slotted(t, c, c.Reservation, `{"schema":1,"reserved":1000,"boot":"a-boot-before-a-crash"}`)
	slotted(t, c, c.Lock, `{"schema":1,"next":7,"reserved":1000,"boot":"a-boot-before-a-crash"}`)
	first := take(t, c, 1) // its taker dies before using it
	if first != 1001 {
		t.Fatalf("first fence after a reboot %d, want 1001", first)
	}
	if got := take(t, c, 1); got != 1002 {
		t.Fatalf("then %d, want 1002", got)
	}
}

// The counter is never fsynced: lost, torn or emptied it only costs a
// reservation.
func TestALostCounterOnlyCostsAReservation(t *testing.T) {
	c := newCounter(t)
	last := take(t, c, 1)
	for _, damage := range []func(string) error{
		os.Remove,
		func(p string) error { return os.WriteFile(p, []byte("torn"), 0o600) },
		func(p string) error { return os.Truncate(p, 0) },
	} {
		if err := damage(c.Dir.Join(c.Lock)); err != nil {
			t.Fatal(err)
		}
		got := take(t, c, 1)
		if got <= last {
			t.Fatalf("fence %d after the counter was damaged, not above %d", got, last)
		}
		last = got
	}
}

// An earlier resident role's fence file is a reservation of its fence.
func TestAnEarlierRolesFenceFileIsAReservation(t *testing.T) {
	c := newCounter(t)
	if err := os.WriteFile(c.Dir.Join(c.Reservation), []byte(`{"schema":1,"fence":41}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := take(t, c, 1); got != 42 {
		t.Fatalf("fence %d over an earlier fence file of 41, want 42", got)
	}
	raw, _ := os.ReadFile(c.Dir.Join(c.Reservation))
	if !IsSlotted(raw) {
		t.Fatalf("the earlier fence file was not replaced by a reservation: %q", raw)
	}
}

func TestACorruptReservationFailsClosedUntilRepaired(t *testing.T) {
	c := newCounter(t)
	before := take(t, c, 1)
	path := c.Dir.Join(c.Reservation)
	os.Remove(c.Dir.Join(c.Lock)) // so the reservation is read
	if err := os.WriteFile(path, []byte(`{"schema":1,"reserved":7`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Take(1); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Take over a corrupt reservation: %v, want ErrCorrupt naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != `{"schema":1,"reserved":7` {
		t.Fatalf("the corrupt reservation was overwritten by Take: %q", b)
	}
	now := time.Now()
	r, err := c.Repair(0, now)
	if err != nil || r == nil || r.Path != path || !errors.Is(r.Cause, store.ErrCorrupt) || r.From != uint64(now.UnixMicro())+1 {
		t.Fatalf("Repair = %+v, %v; want fences from the clock floor %d", r, err, now.UnixMicro()+1)
	}
	if got := take(t, c, 1); got <= before || got < r.From {
		t.Fatalf("fence %d after the repair, want at least %d", got, r.From)
	}
	if r, err := c.Repair(0, now); r != nil || err != nil {
		t.Fatalf("Repair of a good reservation = %+v, %v; want nothing done", r, err)
	}
}

func TestFencesBeyondTheLimitAreCorrupt(t *testing.T) {
	c := newCounter(t)
	slotted(t, c, c.Reservation, `{"schema":1,"reserved":9223372036854775809,"boot":"b"}`)
	if _, err := c.Take(1); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("a reservation beyond FenceMax: %v, want ErrCorrupt", err)
	}
	slotted(t, c, c.Reservation, `{"schema":1,"reserved":1,"boot":"b"}`)
	if _, err := c.Take(FenceMax - 1); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("fences used up: %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir.Path, c.Lock)); err != nil {
		t.Fatal(err)
	}
}

// UsedUpAt says what Take would say of a fence asked for, and changes
// nothing: a fence above FenceMax-FenceBlock is never reserved.
func TestUsedUpAtIsTakesAnswer(t *testing.T) {
	for _, tc := range []struct {
		atLeast uint64
		usedUp  bool
	}{{1, false}, {FenceMax - FenceBlock, false}, {FenceMax - FenceBlock + 1, true}, {FenceMax, true}} {
		c := newCounter(t)
		take(t, c, 1)
		got, err := c.UsedUpAt(tc.atLeast)
		if err != nil || got != tc.usedUp {
			t.Fatalf("UsedUpAt(%d) = %v, %v; want %v", tc.atLeast, got, err, tc.usedUp)
		}
		if _, err := c.Take(tc.atLeast); errors.Is(err, ErrUsedUp) != tc.usedUp {
			t.Fatalf("Take(%d) = %v after UsedUpAt said %v", tc.atLeast, err, got)
		}
	}
}

// Something other than a regular file where the counter belongs fails
// every Take before the fence lock (S6, naming it); Problem says so
// without changing anything, and Repair clears it: nobody can hold the
// lock on it, and a new counter only costs a reservation (S4).
func TestJunkInTheCountersPlaceIsRepaired(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(string) error
	}{
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o600) }},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCounter(t)
			last := take(t, c, 1)
			path := c.Dir.Join(c.Lock)
			os.Remove(path)
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Take(1); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Take over a %s counter: %v, want ErrCorrupt naming %s", tc.name, err, path)
			}
			if err := c.Problem(); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Problem = %v, want ErrCorrupt naming %s", err, path)
			}
			r, err := c.Repair(0, time.Now())
			if err != nil || r == nil || r.Path != path || !strings.Contains(r.Cause.Error(), path) {
				t.Fatalf("Repair = %+v, %v; want the %s at %s cleared", r, err, tc.name, path)
			}
			got := take(t, c, 1)
			if got <= last || got < r.From {
				t.Fatalf("fence %d after the repair, want above %d and at least %d", got, last, r.From)
			}
			if err := c.Problem(); err != nil {
				t.Fatalf("Problem after the repair: %v", err)
			}
			if r, err := c.Repair(0, time.Now()); r != nil || err != nil {
				t.Fatalf("Repair of good files = %+v, %v; want nothing done", r, err)
			}
		})
	}
	// A symlink stays refused, for its owner to look at.
	c := newCounter(t)
	take(t, c, 1)
	path := c.Dir.Join(c.Lock)
	os.Remove(path)
	if err := os.Symlink("/etc/passwd", path); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Repair(0, time.Now()); !errors.Is(err, store.ErrUnsafe) {
		t.Fatalf("Repair over a symlinked counter: %v, want ErrUnsafe", err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink was not left in place: %v, %v", fi, err)
	}
}

// A reservation at or beyond the limit, in either format (an earlier
// role's {"schema":1,"fence":N} with N huge included), fails Take closed;
// Problem names it, so that release --force repairs it, and the repaired
// reservation has fences left: Take works after one Repair.
func TestAUsedUpReservationIsRepairedToOneWithFencesLeft(t *testing.T) {
	for _, content := range []string{
		`{"schema":1,"fence":18446744073709551615}`,
		`{"schema":1,"fence":9223372036854775808}`,
		`{"schema":1,"fence":9223372036854775807}`,
		`{"schema":1,"reserved":18446744073709551615,"boot":"b"}`,
		`{"schema":1,"reserved":9223372036854775790,"boot":"b"}`,
	} {
		c := newCounter(t)
		if err := os.WriteFile(c.Dir.Join(c.Reservation), []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Take(1); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("%s: Take = %v, want ErrCorrupt", content, err)
		}
		if err := c.Problem(); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("%s: Problem = %v, want ErrCorrupt (release --force must see it)", content, err)
		}
		now := time.Now()
		r, err := c.Repair(0, now)
		if err != nil || r == nil {
			t.Fatalf("%s: Repair = %+v, %v; want a repair", content, r, err)
		}
		got, err := c.Take(1)
		if err != nil {
			t.Fatalf("%s: Take after Repair (fences from %d): %v", content, r.From, err)
		}
		if got < r.From || got < uint64(now.UnixMicro()) {
			t.Fatalf("%s: fence %d after the repair, want at least %d", content, got, r.From)
		}
		if err := c.Problem(); err != nil {
			t.Fatalf("%s: Problem after the repair: %v", content, err)
		}
	}
}

// RestartFloor: a counter whose files are gone restarts at the clock's
// floor (above any count); one that still counts needs none.
func TestRestartFloor(t *testing.T) {
	c := newCounter(t)
	now := time.Unix(1_800_000_000, 0)
	if got := c.RestartFloor(now); got != uint64(now.UnixMicro()) {
		t.Fatalf("no files: floor %d, want %d", got, now.UnixMicro())
	}
	take(t, c, 1)
	if got := c.RestartFloor(now); got != 0 {
		t.Fatalf("a counting counter: floor %d, want 0", got)
	}
}
