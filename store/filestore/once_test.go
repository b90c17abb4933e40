package filestore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

// Done IDs that cannot be read fail closed (B4): Done and a holder's mark
// say which file, naming it, and once-reset clears them all.
func TestCorruptDoneIDs(t *testing.T) {
	s, root := newStore(t)
	l, _, err := s.Acquire(t.Context(), "k", store.Claim{Name: "a", TTL: time.Minute})
	if err != nil || l == nil {
		t.Fatal(err)
	}
	if err := l.ReleaseDone(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "keys", encodeKey("k"), doneFile)
	for _, junk := range []string{"", "{", `{"schema":9,"done":[]}`} {
		if err := os.WriteFile(path, []byte(junk), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Done(t.Context(), "k"); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("Done of %q = %v; want ErrCorrupt naming %s", junk, err, path)
		}
	}
	l2, _, err := s.Acquire(t.Context(), "k", store.Claim{Name: "b", TTL: time.Minute})
	if err != nil || l2 == nil {
		t.Fatal(err)
	}
	if err := l2.ReleaseDone(t.Context(), "b"); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("a mark over unreadable done IDs = %v, want ErrCorrupt", err)
	}
	if ok, err := s.Reopen(t.Context(), "k", "b"); !ok || err != nil {
		t.Fatalf("Reopen over unreadable done IDs = %v, %v; want true, nil", ok, err)
	}
	if d, err := s.Done(t.Context(), "k"); err != nil || len(d) != 0 {
		t.Fatalf("Done after the reset = %v, %v", d, err)
	}
}
