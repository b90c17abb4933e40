package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// snapshot is every path under root with its kind and content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			m[path] = "symlink to " + target
		case d.IsDir():
			m[path] = "dir"
		case d.Type()&fs.ModeSocket != 0:
			m[path] = "socket" // a holder's notification socket
		default:
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			m[path] = string(b)
		}
		return nil
	})
	return m
}

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s changed from %q to %q", p, v, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}

// keyAtFence leaves key free at fence n.
func keyAtFence(t *testing.T, s *Store, key string, n int) {
	t.Helper()
	for range n {
		mustRelease(t, mustAcquire(t, s, key, claim("x")))
	}
}

func TestCorruptStateFailsClosed(t *testing.T) {
	write := func(name, data string) func(t *testing.T, kd string) {
		return func(t *testing.T, kd string) {
			os.MkdirAll(filepath.Dir(filepath.Join(kd, name)), 0o700)
			if err := os.WriteFile(filepath.Join(kd, name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	truncate := func(t *testing.T, kd string) {
		b, err := os.ReadFile(filepath.Join(kd, "lease"))
		if err != nil {
			t.Fatal(err)
		}
		write("lease", string(b[:len(b)/2]))(t, kd)
	}
	slotted := func(name, data string) func(t *testing.T, kd string) {
		f, err := statefs.WholeSlots([]byte(data), 2)
		if err != nil {
			panic(err)
		}
		return write(name, string(f))
	}
	replaceWithDir := func(name string) func(t *testing.T, kd string) {
		return func(t *testing.T, kd string) {
			os.Remove(filepath.Join(kd, name))
			os.MkdirAll(filepath.Dir(filepath.Join(kd, name)), 0o700)
			if err := os.Mkdir(filepath.Join(kd, name), 0o700); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		file    string // named by the error
		corrupt func(t *testing.T, kd string)
	}{
		{"empty record", "lease", write("lease", "")},
		{"truncated record", "lease", truncate},
		{"garbage record", "lease", write("lease", "\x00garbage")},
		{"unknown schema", "lease", write("lease", `{"schema":2,"fence":3,"version":6,"holder":null}`)},
		{"null record", "lease", write("lease", `null`)},
		{"holder without token", "lease", write("lease", `{"schema":1,"fence":3,"version":6,"holder":{"pid":1}}`)},
		{"record is a directory", "lease", replaceWithDir("lease")},
		{"no slot valid", "lease", write("lease", string(make([]byte, 2*statefs.MinSlotSize)))},
		{"unknown schema in a slot", "lease", slotted("lease", `{"schema":2,"fence":3,"version":6,"holder":null}`)},
		{"guard is a directory", "guard", replaceWithDir("guard")},
		{"live is a directory", "live", replaceWithDir("live")},
		{"garbage queue entry", "queue/00000000000000000001", write("queue/00000000000000000001", "{")},
		{"queue entry of unknown schema", "queue/00000000000000000002", write("queue/00000000000000000002", `{"schema":7,"pid":1}`)},
		{"stranger in the queue", "queue/README", write("queue/README", "hi")},
		{"queue entry is a directory", "queue/00000000000000000003", replaceWithDir("queue/00000000000000000003")},
		{"garbage slot record", "holders/1/lease", write("holders/1/lease", "\x00garbage")},
		{"slot's live is a directory", "holders/2/live", replaceWithDir("holders/2/live")},
		{"stranger in holders", "holders/README", write("holders/README", "hi")},
		{"slot is a file", "holders/3", write("holders/3", "hi")},
		{"holders is a file", "holders", write("holders", "hi")},
		{"unknown kind", "lease", slotted("lease", `{"schema":1,"fence":3,"version":6,"revoked":true,"holder":{"kind":"many","pid":1}}`)},
		{"slot beyond slots", "holders/1/lease", slotted("holders/1/lease", `{"schema":1,"fence":3,"version":6,"revoked":true,"holder":{"kind":"slot","slots":2,"slot":2,"pid":1}}`)},
		{"waiter of unknown kind", "queue/00000000000000000004", write("queue/00000000000000000004", `{"schema":1,"pid":1,"kind":"slot","slots":1}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root := newStore(t)
			ctx := t.Context()
			keyAtFence(t, s, "bad", 3)
			other := mustAcquire(t, s, "good", claim("g"))
			defer mustRelease(t, other)
			last := other.Fence()
			kd := keyPath(root, "bad")
			tc.corrupt(t, kd)
			path := filepath.Join(kd, tc.file)
			before := snapshot(t, root)

			_, _, err := s.Acquire(ctx, "bad", claim("x"))
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Errorf("Acquire: %v; want ErrCorrupt naming %s", err, path)
			}
			w := claim("w")
			w.Wait = true
			if _, _, err := s.Acquire(ctx, "bad", w); !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("Acquire with wait: %v; want ErrCorrupt", err)
			}
			st, err := s.Status(ctx, "bad")
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) || st == nil || st.State != store.Corrupt {
				t.Errorf("Status = %+v, %v; want corrupt naming %s", st, err, path)
			}
			if _, err := s.Cancel(ctx, "bad", store.Which{}); tc.file == "lease" && !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("Cancel: %v; want ErrCorrupt", err)
			}
			list, err := s.List(ctx)
			if err != nil || len(list) != 2 || list[0].Key != "bad" || list[0].State != store.Corrupt ||
				!errors.Is(list[0].Err, store.ErrCorrupt) || list[1].Key != "good" || list[1].State != store.Held {
				t.Errorf("List = %+v, %v; want bad corrupt and good held", list, err)
			}
			if _, err := s.Prune(ctx); err != nil {
				t.Errorf("Prune: %v", err)
			}
			sameSnapshot(t, before, snapshot(t, root))

			ok, err := s.Revoke(ctx, "bad", store.Which{})
			if !ok || err != nil {
				t.Fatalf("Revoke = %v, %v; want it to clear the corruption", ok, err)
			}
			l := mustAcquire(t, s, "bad", claim("after"))
			defer mustRelease(t, l)
			// Fences come from the store's counter: a corrupt record
			// cannot make them go back, whatever was in it.
			if l.Fence() <= last {
				t.Errorf("fence after clearing = %d, not above every earlier one (%d)", l.Fence(), last)
			}
		})
	}
}

func TestRevokeSalvagesALargerFence(t *testing.T) {
	s, root := newStore(t)
	keyAtFence(t, s, "k", 1)
	far := uint64(1) << 62
	garbage := `{"schema":1,"fence":` + itoa64(far) + `,"version":9,"holder":{"pid":`
	if err := os.WriteFile(filepath.Join(keyPath(root, "k"), "lease"), []byte(garbage), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Revoke(t.Context(), "k", store.Which{}); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	l := mustAcquire(t, s, "k", claim("a"))
	defer mustRelease(t, l)
	if l.Fence() != far+1 {
		t.Errorf("fence = %d, want %d: above the one still readable in the corrupt record", l.Fence(), far+1)
	}
}

func itoa64(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func TestHolderWhoseRecordIsCorruptedHasLostIt(t *testing.T) {
	s, root := newStore(t)
	l := mustAcquire(t, s, "k", claim("a"))
	if err := os.WriteFile(filepath.Join(keyPath(root, "k"), "lease"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Check(t.Context()); !errors.Is(err, store.ErrLost) || !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Check: %v; want ErrLost and ErrCorrupt", err)
	}
	if _, err := l.Renew(t.Context()); !errors.Is(err, store.ErrLost) {
		t.Errorf("Renew: %v; want ErrLost", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release of a lost lease: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(keyPath(root, "k"), "lease")); string(b) != "x" {
		t.Errorf("Release overwrote a corrupt record with %q", b)
	}
}

func TestUnsafeSymlinksAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string // relative to the key directory; "" is the key directory itself
		dir  bool   // the symlink points at a directory
	}{
		{"key directory", "", true},
		{"record", "lease", false},
		{"guard", "guard", false},
		{"live", "live", false},
		{"queue", "queue", true},
		{"queue entry", "queue/00000000000000000001", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root := newStore(t)
			ctx := t.Context()
			keyAtFence(t, s, "k", 1)
			kd := keyPath(root, "k")
			link := filepath.Join(kd, tc.path)
			if tc.path == "" {
				link = kd
			}
			target := filepath.Join(t.TempDir(), "target")
			if tc.dir {
				if err := os.Mkdir(target, 0o700); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(target, []byte("do not touch\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(filepath.Dir(link), 0o700)
			if err := os.RemoveAll(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, filepath.Dir(target))
			stateBefore := snapshot(t, root)

			if _, _, err := s.Acquire(ctx, "k", claim("x")); !errors.Is(err, store.ErrUnsafe) || !strings.Contains(err.Error(), link) {
				t.Errorf("Acquire: %v; want ErrUnsafe naming %s", err, link)
			}
			if _, err := s.Status(ctx, "k"); !errors.Is(err, store.ErrUnsafe) {
				t.Errorf("Status: %v; want ErrUnsafe", err)
			}
			if list, err := s.List(ctx); err != nil || len(list) != 1 || list[0].State != store.Corrupt || !errors.Is(list[0].Err, store.ErrUnsafe) {
				t.Errorf("List = %+v, %v; want the key unsafe", list, err)
			}
			if _, err := s.Revoke(ctx, "k", store.Which{}); !errors.Is(err, store.ErrUnsafe) {
				t.Errorf("Revoke: %v; want ErrUnsafe", err)
			}
			s.Prune(ctx)
			sameSnapshot(t, before, snapshot(t, filepath.Dir(target)))
			sameSnapshot(t, stateBefore, snapshot(t, root))
		})
	}
}

func TestUnsafeRootIsRefused(t *testing.T) {
	t.Run("group writable", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "state")
		os.Mkdir(root, 0o700)
		os.Chmod(root, 0o770)
		if _, err := Open(root, Options{}); !errors.Is(err, store.ErrUnsafe) || !strings.Contains(err.Error(), root) {
			t.Errorf("Open: %v; want ErrUnsafe naming %s", err, root)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		real := filepath.Join(t.TempDir(), "real")
		os.Mkdir(real, 0o700)
		root := filepath.Join(t.TempDir(), "state")
		os.Symlink(real, root)
		if _, err := Open(root, Options{}); !errors.Is(err, store.ErrUnsafe) || !strings.Contains(err.Error(), root) {
			t.Errorf("Open: %v; want ErrUnsafe naming %s", err, root)
		}
		if ents, _ := os.ReadDir(real); len(ents) != 0 {
			t.Errorf("Open wrote through the symlink: %v", ents)
		}
	})
	t.Run("keys writable by others", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "state")
		os.MkdirAll(filepath.Join(root, "keys"), 0o700)
		os.Chmod(filepath.Join(root, "keys"), 0o703)
		if _, err := Open(root, Options{}); !errors.Is(err, store.ErrUnsafe) {
			t.Errorf("Open: %v; want ErrUnsafe", err)
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a directory away")
		}
		root := filepath.Join(t.TempDir(), "state")
		os.Mkdir(root, 0o700)
		if err := os.Chown(root, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(root, Options{}); !errors.Is(err, store.ErrUnsafe) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("Open: %v; want ErrUnsafe about the owner", err)
		}
	})
	t.Run("created if missing", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "a", "b", "state")
		s, err := Open(root, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		assertModes(t, root)
	})
}

func TestFailedWriteNamesThePathAndLeavesNoTemp(t *testing.T) {
	s, root := newStore(t)
	l := mustAcquire(t, s, "k", claim("a"))
	defer mustRelease(t, l)
	kd := keyPath(root, "k")
	// A directory that is not empty sits where the cancel file goes: the
	// rename over it fails, root or not.
	if err := os.MkdirAll(filepath.Join(kd, "cancel", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := s.Cancel(t.Context(), "k", store.Which{})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(kd, "cancel")) || !strings.Contains(err.Error(), "directory") {
		t.Errorf("Cancel: %v; want an error naming %s and the cause", err, filepath.Join(kd, "cancel"))
	}
	if temps, _ := filepath.Glob(filepath.Join(kd, statefs.TempPrefix+"*")); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}
	// The holder ignores what it cannot read as a cancel request.
	if req, err := l.Check(t.Context()); req != store.RequestNone || err != nil {
		t.Errorf("Check = %v, %v", req, err)
	}
}

func TestFullDiskNamesThePathAndLeavesNoTemp(t *testing.T) {
	s, root := newStore(t)
	keyAtFence(t, s, "k", 2)
	kd := keyPath(root, "k")
	before := snapshot(t, root)
	// A file size limit of one byte fails the write of the record the way a
	// full disk would, for root too.
	c := spawn(t, "fsize", root, "k")
	msg := c.Expect("error")
	// The first write to fail is the store's fence counter, before the
	// key's record: either names its file and the cause.
	if !strings.Contains(msg, root+"/") || !strings.Contains(msg, "file too large") {
		t.Errorf("error %q; want it to name a file in %s and the cause", msg, root)
	}
	_ = kd
	c.Wait()
	sameSnapshot(t, before, snapshot(t, root))
	l := mustAcquire(t, s, "k", claim("a"))
	defer mustRelease(t, l)
	if l.Fence() <= 2 {
		t.Errorf("fence after a failed write = %d, want above 2", l.Fence())
	}
}

func TestUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes through permission bits; TestFullDiskNamesThePathAndLeavesNoTemp covers failed writes")
	}
	s, root := newStore(t)
	keyAtFence(t, s, "k", 1)
	kd := keyPath(root, "k")
	os.Chmod(kd, 0o500)
	defer os.Chmod(kd, 0o700)
	_, _, err := s.Acquire(t.Context(), "k", claim("a"))
	if err == nil || !strings.Contains(err.Error(), kd) || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("Acquire in a read-only directory: %v; want a permission error naming %s", err, kd)
	}
}

func TestTokenNeverLeaks(t *testing.T) {
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
	s, root := newStore(t, Options{Logger: logger})
	ctx := t.Context()
	l := mustAcquire(t, s, "k", claim("a"))
	kd := keyPath(root, "k")
	data, err := os.ReadFile(filepath.Join(kd, "lease"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := statefs.ParseSlotted(data, "lease")
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(f.Data, &rec); err != nil || len(rec.Token) != 32 {
		t.Fatalf("record %v: %v", rec, err)
	}
	var said []string
	say := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		said = append(said, string(b))
	}
	st := mustStatus(t, s, "k")
	say(st)
	list, _ := s.List(ctx)
	say(list)
	_, h, _ := s.Acquire(ctx, "k", claim("b"))
	say(h)
	s.Cancel(ctx, "k", store.Which{})
	s.Revoke(ctx, "k", store.Which{})
	_, err = l.Renew(ctx)
	said = append(said, err.Error())
	l.Release(ctx)
	// A record cut off inside the token: the error must not quote it.
	cut := strings.Index(string(data), rec.Token) + 16
	os.WriteFile(filepath.Join(kd, "lease"), data[:cut], 0o600)
	_, _, err = s.Acquire(ctx, "k", claim("c"))
	said = append(said, err.Error())
	_, err = s.Status(ctx, "k")
	said = append(said, err.Error())
	said = append(said, logs.String())
	for _, out := range said {
		if strings.Contains(out, rec.Token) || strings.Contains(out, rec.Token[:16]) {
			t.Errorf("the token shows in %s", out)
		}
	}
}
