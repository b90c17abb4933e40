package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
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

// slottedState writes a slotted record file (internal/statefs) holding content at
// name in key's directory, or in the root for an empty key.
func slottedState(t *testing.T, s *Store, key, name, content string) string {
	t.Helper()
	p := filepath.Join(s.Root(), name)
	if key != "" {
		p = filepath.Join(s.Root(), "keys", encodeKey(key), name)
	}
	f, err := statefs.WholeSlots([]byte(content), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, f, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestFencesComeFromOneCounterPerStore(t *testing.T) {
	s := openStore(t)
	var last uint64
	for _, key := range []string{"a", "b", "a", "c", "b"} {
		got := takeFence(t, s, key)
		if got <= last {
			t.Fatalf("key %s: fence %d, not above every earlier one (%d)", key, got, last)
		}
		last = got
	}
}

func TestFencesSkipTheReservationAfterAReboot(t *testing.T) {
	s := openStore(t)
	first := takeFence(t, s, "k")
	// Within one boot the counter is exact, reservation or not.
	if got := takeFence(t, s, "k"); got != first+1 {
		t.Fatalf("same boot: fence %d after %d, want %d", got, first, first+1)
	}
	// A counter and reservation of another boot: the crash may have lost
	// counts up to the reservation, so the next fence must go above it.
	slottedState(t, s, "", fencesFile, `{"schema":1,"reserved":1000,"boot":"a-boot-before-a-crash"}`)
	slottedState(t, s, "", counterFile, `{"schema":1,"next":7,"reserved":1000,"boot":"a-boot-before-a-crash"}`)
	if got := takeFence(t, s, "k"); got != 1001 {
		t.Fatalf("after a reboot: fence %d, want 1001 (above the old reservation)", got)
	}
	if got := takeFence(t, s, "other"); got != 1002 {
		t.Fatalf("then: fence %d, want 1002", got)
	}
	// The reservation on disk always covers the fence handed out.
	raw, err := os.ReadFile(filepath.Join(s.Root(), fencesFile))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := statefs.ParseSlotted(raw, fencesFile)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Reserved uint64
		Boot     string
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err := json.Unmarshal(cur.Data, &res); err != nil || res.Reserved < 1002 || res.Boot != strings.TrimSpace(string(boot)) {
		t.Fatalf("reservation %s (%v) does not cover fence 1002 in this boot", cur.Data, err)
	}
}

// A counter that is lost or torn within a boot (it is never fsynced) only
// costs a reservation: fences still go up.
func TestALostCounterOnlyCostsAReservation(t *testing.T) {
	s := openStore(t)
	var last uint64
	for range 3 {
		last = takeFence(t, s, "k")
	}
	for _, damage := range []func(string) error{
		os.Remove,
		func(p string) error { return os.WriteFile(p, []byte("torn"), 0o600) },
		func(p string) error { return os.Truncate(p, 0) },
	} {
		if err := damage(filepath.Join(s.Root(), counterFile)); err != nil {
			t.Fatal(err)
		}
		got := takeFence(t, s, "k")
		if got <= last {
			t.Fatalf("fence %d after the counter was damaged, not above %d", got, last)
		}
		last = got
	}
}

func TestCorruptReservationFailsClosedUntilRevoked(t *testing.T) {
	s := openStore(t)
	before := takeFence(t, s, "k")
	path := filepath.Join(s.Root(), fencesFile)
	os.Remove(filepath.Join(s.Root(), counterFile)) // so the reservation is read
	if err := os.WriteFile(path, []byte(`{"schema":1,"reser`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Acquire(context.Background(), "other", store.Claim{Name: "t", TTL: time.Minute})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("acquire over a corrupt reservation: %v, want ErrCorrupt naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != `{"schema":1,"reser` {
		t.Fatalf("the corrupt reservation was overwritten by acquire: %q", b)
	}
	if _, err := s.Revoke(context.Background(), "k", store.Which{}); err != nil {
		t.Fatal(err)
	}
	if got := takeFence(t, s, "other"); got <= before || got <= uint64(time.Now().Add(-time.Hour).UnixMicro()) {
		t.Fatalf("fence %d after clearing, want above %d and above the clock floor", got, before)
	}
}

// A FIFO where the store's fence counter belongs stops every acquisition
// in the store, naming it; any key's release --force clears it, and fences
// go on above every earlier one.
func TestAFifoInTheCountersPlaceFailsClosedUntilRevoked(t *testing.T) {
	s := openStore(t)
	before := takeFence(t, s, "k")
	path := filepath.Join(s.Root(), counterFile)
	os.Remove(path)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Acquire(context.Background(), "other", store.Claim{Name: "t", TTL: time.Minute})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("acquire over a fifo counter: %v, want ErrCorrupt naming %s", err, path)
	}
	if had, err := s.Revoke(context.Background(), "k", store.Which{}); err != nil || !had {
		t.Fatalf("Revoke = %v, %v; want the fifo cleared", had, err)
	}
	if got := takeFence(t, s, "other"); got <= before {
		t.Fatalf("fence %d after clearing, want above %d", got, before)
	}
}

func mustKeyDir(t *testing.T, s *Store, key string) dir {
	t.Helper()
	kd, err := s.keyDir(key, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kd.Close)
	return kd
}

// An acquirer that dies (or fails) between making a new boot's reservation
// and writing its record costs a fence, never repeats one.
func TestFenceAfterARebootWhoseFirstAcquirerFailed(t *testing.T) {
	s := openStore(t)
	for range 10 {
		takeFence(t, s, "k")
	}
	slottedState(t, s, "", fencesFile, `{"schema":1,"reserved":64,"boot":"before-the-crash"}`)
	slottedState(t, s, "", counterFile, `{"schema":1,"next":4,"reserved":64,"boot":"before-the-crash"}`)
	// The first acquirer of the new boot takes a fence, then fails to
	// write its record.
	first, err := s.nextFence(1)
	if err != nil {
		t.Fatal(err)
	}
	if first != 65 {
		t.Fatalf("first fence of the new boot %d, want 65", first)
	}
	if got := takeFence(t, s, "k"); got <= first {
		t.Fatalf("fence %d after a failed first acquirer, want above %d", got, first)
	}
}

// A key pruned away and a corrupt record cleared by release --force both
// leave the key's next fence above every earlier one: it is the store's.
func TestFencesSurvivePruneAndRepair(t *testing.T) {
	s := openStore(t)
	var last uint64
	for range 5 {
		last = takeFence(t, s, "k")
	}
	kdPath := filepath.Join(s.Root(), "keys", encodeKey("k"))
	// The history keeps a key's directory through Prune; prune --history
	// drops it first.
	if _, err := s.ForgetHistory(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kdPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a free key's directory after prune: %v, want it removed", err)
	}
	if got := takeFence(t, s, "k"); got <= last {
		t.Fatalf("fence %d after prune removed the key, not above %d", got, last)
	} else {
		last = got
	}
	writeState(t, s, "k", leaseFile, `garbage`)
	if _, err := s.Revoke(context.Background(), "k", store.Which{}); err != nil {
		t.Fatal(err)
	}
	if got := takeFence(t, s, "k"); got <= last {
		t.Fatalf("fence %d after a repair, not above %d", got, last)
	}
}

// A record an earlier fencerun wrote (plain JSON, one fence per key) is
// read as it is, and its fence is not handed out again.
func TestAnEarlierFencerunsRecordIsReadAndRaisesTheCounter(t *testing.T) {
	s := openStore(t)
	takeFence(t, s, "k")
	writeState(t, s, "k", leaseFile, `{"schema":1,"fence":500,"version":9,"holder":null}`)
	if got := takeFence(t, s, "k"); got <= 500 {
		t.Fatalf("fence %d over an earlier record of fence 500, want above it", got)
	}
	if got := takeFence(t, s, "other"); got <= 501 {
		t.Fatalf("the next key's fence %d, want above 501", got)
	}
}

func TestFenceBeyondTheLimitIsCorrupt(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	takeFence(t, s, "k")
	path := slottedState(t, s, "k", leaseFile, `{"schema":1,"fence":18446744073709551615,"version":1,"holder":null}`)
	_, _, err = s.Acquire(context.Background(), "k", store.Claim{Name: "t", TTL: time.Minute})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a fence at the top of uint64: %v, want ErrCorrupt naming %s", err, path)
	}
}

// A free record whose fence leaves no fence above it (statefs.FenceMax or just
// under: only damage or a hand edit puts it there) fails every acquisition
// closed, naming the record, not the reservation; release --force lowers
// it to what a cleared record keeps, and the key runs again. A fence near
// the limit that still has fences above it is neither refused nor
// lowered: fences go on rising.
func TestARecordsFenceNearTheLimit(t *testing.T) {
	for _, fence := range []uint64{statefs.FenceMax, statefs.FenceMax - 1, statefs.FenceMax - statefs.FenceBlock} {
		s := openStore(t)
		takeFence(t, s, "k")
		path := slottedState(t, s, "k", leaseFile, fmt.Sprintf(`{"schema":1,"fence":%d,"version":1,"holder":null}`, fence))
		_, _, err := s.Acquire(context.Background(), "k", store.Claim{Name: "t", TTL: time.Minute})
		if !errors.Is(err, store.ErrCorrupt) || !errors.Is(err, statefs.ErrUsedUp) || !strings.Contains(err.Error(), path) {
			t.Fatalf("fence %d: acquire = %v, want ErrCorrupt and ErrUsedUp naming %s", fence, err, path)
		}
		if had, err := s.Revoke(context.Background(), "k", store.Which{}); err != nil || !had {
			t.Fatalf("fence %d: Revoke = %v, %v; want the record's fence lowered", fence, had, err)
		}
		if got := takeFence(t, s, "k"); got <= statefs.FenceMax-2*statefs.FenceBlock {
			t.Fatalf("fence %d: %d after release --force, want above the %d a cleared record keeps", fence, got, uint64(statefs.FenceMax-2*statefs.FenceBlock))
		}
	}
	s := openStore(t)
	takeFence(t, s, "k")
	slottedState(t, s, "k", leaseFile, fmt.Sprintf(`{"schema":1,"fence":%d,"version":1,"holder":null}`, uint64(statefs.FenceMax-2*statefs.FenceBlock+1)))
	last := takeFence(t, s, "k")
	if last <= statefs.FenceMax-2*statefs.FenceBlock+1 {
		t.Fatalf("fence %d over a record of %d, want above it", last, uint64(statefs.FenceMax-2*statefs.FenceBlock+1))
	}
	if _, err := s.Revoke(context.Background(), "k", store.Which{}); err != nil {
		t.Fatal(err)
	}
	if got := takeFence(t, s, "k"); got <= last {
		t.Fatalf("fence %d after release --force of a key with fences left, want above %d", got, last)
	}
}

func TestLeftoversArePassedOnUntilConfirmed(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	takeFence(t, s, "k")
	// A dead holder (nobody holds live) of this host that was itself
	// still stopping an earlier holder's leftovers here, and a tree
	// recorded under another host name, which in a file store is this
	// host's too (a hostname changed since, a UTS namespace: Store.mark).
	slottedState(t, s, "k", leaseFile, fmt.Sprintf(`{"schema":1,"fence":1,"version":2,"token":"00112233445566778899aabbccddeeff",`+
		`"holder":{"name":"b","pid":999999,"host":%[1]q,"marker":"M-b","acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:30Z"},`+
		`"trees":[{"holder_pid":999997,"host":"tidy2-other-host.invalid","marker":"M-o"},{"holder_pid":999998,"host":%[1]q,"marker":"M-a"}]}`, s.host))
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
	if p == nil || strings.Join(markers(p), ",") != "M-o,M-a,M-b" {
		t.Fatalf("predecessor %+v, want leftovers M-o, M-a and M-b", p)
	}
	// Released without confirming: the next holder must still stop them.
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l = acquire()
	if p := l.Predecessor(); p == nil || strings.Join(markers(p), ",") != "M-o,M-a,M-b" {
		t.Fatalf("after an unconfirmed release: predecessor %+v, want leftovers M-o, M-a and M-b", p)
	}
	if err := l.LeftoversStopped(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// All are forgotten, the one recorded under another host name too.
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
