package filestore

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/store"
)

func TestEncodeKey(t *testing.T) {
	for _, tc := range []struct{ key, name string }{
		{"a", "k-a"},
		{"deploy:staging", "k-deploy_3astaging"},
		{"a/../b", "k-a_2f_2e_2e_2fb"},
		{"CON", "k-_43_4f_4e"},
		{"con", "k-con"},
		{"a.", "k-a_2e"},
		{"a..", "k-a_2e_2e"},
		{"Ab", "k-_41b"},
		{"aB", "k-a_42"},
		{"a_b", "k-a_5fb"},
		{"a-b", "k-a-b"},
		{"0", "k-0"},
	} {
		if got := encodeKey(tc.key); got != tc.name {
			t.Errorf("encodeKey(%q) = %q, want %q", tc.key, got, tc.name)
		}
		back, err := decodeKey(tc.name)
		if err != nil || back != tc.key {
			t.Errorf("decodeKey(%q) = %q, %v; want %q", tc.name, back, err, tc.key)
		}
	}
}

func TestEncodeKeyIsSafeAndReversible(t *testing.T) {
	long := strings.Repeat("Z", store.MaxKeyLen)
	keys := []string{
		"a", "A", "a/../b", "../x"[3:], "x/..", "x/.", "CON", "con", "PRN", "AUX", "NUL", "COM1", "LPT1",
		"a.", "a...", "Deploy", "deploy", "DEPLOY", "a:b/c.d_e-f", long, strings.Repeat("a.", 40),
		"0leading", "9/9", "x//y",
	}
	seen := map[string]string{}
	for _, key := range keys {
		if err := store.ValidateKey(key); err != nil {
			t.Fatalf("test key %q is invalid: %v", key, err)
		}
		name := encodeKey(key)
		if strings.ContainsAny(name, "/.") || strings.ToLower(name) != name || len(name) > 242 {
			t.Errorf("encodeKey(%q) = %q: has / or . or upper case, or is over 242 bytes", key, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("keys %q and %q both encode to %q", other, key, name)
		}
		seen[name] = key
		back, err := decodeKey(name)
		if err != nil || back != key {
			t.Errorf("decodeKey(encodeKey(%q)) = %q, %v", key, back, err)
		}
	}
	if n := len(encodeKey(long)); n != 242 {
		t.Errorf("an %d-byte key of escaped bytes encodes to %d bytes, want 242", store.MaxKeyLen, n)
	}
}

func TestDecodeKeyRejectsForeignNames(t *testing.T) {
	for _, name := range []string{
		"", "a", "k-", "K-a", "k-A", "k-a.b", "k-a_4", "k-a_", "k-_4A", "k-_61", "k-_2d",
		"k-_2e", "k-_2fa", "k-a_00", "k-a b", "lost+found", ".tmp-0123", "k-" + strings.Repeat("a", 81),
	} {
		if key, err := decodeKey(name); !errors.Is(err, errNotKey) {
			t.Errorf("decodeKey(%q) = %q, %v; want errNotKey", name, key, err)
		}
	}
}

func FuzzKeyRoundTrip(f *testing.F) {
	for _, s := range []string{"a", "a/../b", "CON", "a.", "x:y_z-w"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if store.ValidateKey(key) != nil {
			return
		}
		back, err := decodeKey(encodeKey(key))
		if err != nil || back != key {
			t.Fatalf("round trip of %q gave %q, %v", key, back, err)
		}
	})
}

func TestInvalidKeyCreatesNothing(t *testing.T) {
	s, root := newStore(t)
	ctx := t.Context()
	for _, key := range []string{"", "-a", ".a", "/a", "a b", "a\x00", "a*", "ä", strings.Repeat("a", store.MaxKeyLen+1)} {
		if _, _, err := s.Acquire(ctx, key, claim("x")); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Acquire(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Status(ctx, key); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Status(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Revoke(ctx, key, store.Which{}); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Revoke(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Cancel(ctx, key, store.Which{}); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Cancel(%q): %v, want ErrInvalidKey", key, err)
		}
	}
	ents, err := os.ReadDir(root + "/keys")
	if err != nil || len(ents) != 0 {
		t.Errorf("keys/ holds %v (%v) after invalid keys; want nothing", ents, err)
	}
}
