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
	p := filepath.Join(s.Root(), "keys", EncodeKey(key), name)
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
