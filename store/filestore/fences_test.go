package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// takeFence acquires and releases key once and returns the fence it got.
func takeFence(t *testing.T, s *Store, key string) uint64 {
	t.Helper()
	l, h, err := s.Acquire(context.Background(), key, store.Claim{Name: "t", TTL: time.Minute})
	if err != nil || l == nil {
		t.Fatalf("acquire %s: %v (holder %v)", key, err, h)
	}
	f := l.Fence()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

func writeState(t *testing.T, s *Store, key, name, content string) string {
	t.Helper()
	p := filepath.Join(s.Root(), "keys", encodeKey(key), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFencesSkipTheReservationAfterAReboot(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := takeFence(t, s, "k")
	// Within one boot the next fence follows the record, reservation or not.
	if got := takeFence(t, s, "k"); got != first+1 {
		t.Fatalf("same boot: fence %d after %d, want %d", got, first, first+1)
	}
	// A reservation made in another boot: the crash may have lost records
	// of fences up to it, so the next fence must go above it.
	writeState(t, s, "k", fencesFile, `{"schema":1,"reserved":1000,"boot":"a-boot-before-a-crash"}`)
	if got := takeFence(t, s, "k"); got != 1001 {
		t.Fatalf("after a reboot: fence %d, want 1001 (above the old reservation)", got)
	}
	if got := takeFence(t, s, "k"); got != 1002 {
		t.Fatalf("then: fence %d, want 1002", got)
	}
	// The reservation on disk always covers the fence handed out.
	res, err := readReservation(mustKeyDir(t, s, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reserved < 1002 || res.Boot != bootID() {
		t.Fatalf("reservation %+v does not cover fence 1002 in this boot", res)
	}
}

func TestCorruptReservationFailsClosedUntilRevoked(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := takeFence(t, s, "k")
	path := writeState(t, s, "k", fencesFile, `{"schema":1,"reser`)
	_, _, err = s.Acquire(context.Background(), "k", store.Claim{Name: "t", TTL: time.Minute})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("acquire over a corrupt reservation: %v, want ErrCorrupt naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != `{"schema":1,"reser` {
		t.Fatalf("the corrupt reservation was overwritten by acquire: %q", b)
	}
	if _, err := s.Revoke(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if got := takeFence(t, s, "k"); got <= before {
		t.Fatalf("fence %d after clearing, not above %d", got, before)
	}
}

func mustKeyDir(t *testing.T, s *Store, key string) dir {
	t.Helper()
	kd, err := s.keyDir(key, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kd.close)
	return kd
}

// An acquirer that dies (or fails) between making a new boot's reservation
// and writing its record must not let the stale record's fence count again.
func TestFenceAfterARebootWhoseFirstAcquirerFailed(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 10 {
		takeFence(t, s, "k")
	}
	// The crash lost the record's last writes: it says fence 3 while 10
	// were handed out, and the reservation is the old boot's.
	writeState(t, s, "k", leaseFile, `{"schema":1,"fence":3,"version":3,"holder":null}`)
	writeState(t, s, "k", fencesFile, `{"schema":1,"reserved":64,"boot":"before-the-crash"}`)
	// The first acquirer of the new boot reserves, then fails to write its
	// record: simulated by making the reservation and restoring the record.
	kd := mustKeyDir(t, s, "k")
	rec, _, err := readRecord(kd)
	if err != nil {
		t.Fatal(err)
	}
	first, err := nextFence(kd, rec)
	if err != nil {
		t.Fatal(err)
	}
	if first != 65 {
		t.Fatalf("first fence of the new boot %d, want 65", first)
	}
	if got := takeFence(t, s, "k"); got < first {
		t.Fatalf("fence %d after a failed first acquirer, want at least %d (never back to the stale record's)", got, first)
	}
}

// release --force of a corrupt record raises the reservation before it
// clears anything: a repair that fails half-way still cannot let fences go
// back.
func TestRepairRaisesTheReservationFirst(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last uint64
	for range 5 {
		last = takeFence(t, s, "k")
	}
	writeState(t, s, "k", leaseFile, `garbage`)
	if _, err := s.Revoke(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	// Even if the repaired record were lost, the reservation alone keeps
	// fences above everything before.
	if err := os.Remove(filepath.Join(s.Root(), "keys", encodeKey("k"), leaseFile)); err != nil {
		t.Fatal(err)
	}
	if got := takeFence(t, s, "k"); got <= last || got <= uint64(time.Now().Add(-time.Hour).UnixMicro()) {
		t.Fatalf("fence %d after a repair, want above %d and above the clock floor", got, last)
	}
}

func TestFenceBeyondTheLimitIsCorrupt(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	takeFence(t, s, "k")
	path := writeState(t, s, "k", leaseFile, `{"schema":1,"fence":18446744073709551615,"version":1,"holder":null}`)
	_, _, err = s.Acquire(context.Background(), "k", store.Claim{Name: "t", TTL: time.Minute})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a fence at the top of uint64: %v, want ErrCorrupt naming %s", err, path)
	}
}

func TestLeftoversArePassedOnUntilConfirmed(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	takeFence(t, s, "k")
	// A dead holder (nobody holds live) that was itself still stopping an
	// earlier holder's leftovers.
	writeState(t, s, "k", leaseFile, `{"schema":1,"fence":1,"version":2,"token":"00112233445566778899aabbccddeeff",`+
		`"holder":{"name":"b","pid":999999,"host":"h","marker":"M-b","acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:30Z"},`+
		`"trees":[{"holder_pid":999998,"host":"h","marker":"M-a"}]}`)
	acquire := func() store.Lease {
		t.Helper()
		l, h, err := s.Acquire(context.Background(), "k", store.Claim{Name: "t", TTL: time.Minute})
		if err != nil || l == nil {
			t.Fatalf("acquire: %v (holder %v)", err, h)
		}
		return l
	}
	l := acquire()
	p := l.Predecessor()
	if p == nil || strings.Join(markers(p), ",") != "M-a,M-b" {
		t.Fatalf("predecessor %+v, want leftovers M-a and M-b", p)
	}
	// Released without confirming: the next holder must still stop them.
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l = acquire()
	if p := l.Predecessor(); p == nil || strings.Join(markers(p), ",") != "M-a,M-b" {
		t.Fatalf("after an unconfirmed release: predecessor %+v, want leftovers M-a and M-b", p)
	}
	if err := l.LeftoversStopped(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l = acquire()
	defer l.Release(context.Background())
	if p := l.Predecessor(); p != nil {
		t.Fatalf("after the leftovers were confirmed gone: predecessor %+v, want none", p)
	}
}

func markers(p *store.Holder) []string {
	var out []string
	for _, l := range p.Leftovers {
		out = append(out, l.Marker)
	}
	return out
}
