package statefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// The layer's own checks, once for both of its users; the file backend's
// corrupt_test.go and the resident role's corrupt_test.go and path_test.go
// prove the same through their Acquire and Status.

func beside(t *testing.T, dir string, look bool) Dir {
	t.Helper()
	d, err := OpenBeside(dir, look)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func TestWhatStandsInAFilesPlace(t *testing.T) {
	dir := t.TempDir()
	d := beside(t, dir, false)
	os.Symlink("target", filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "dir"), 0o700)
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600)
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o600)
	for name, want := range map[string]error{"link": store.ErrUnsafe, "dir": store.ErrCorrupt, "fifo": store.ErrCorrupt, "missing": os.ErrNotExist} {
		_, err := d.OpenFile(name, unix.O_RDONLY)
		if !errors.Is(err, want) || !strings.Contains(err.Error(), filepath.Join(dir, name)) {
			t.Errorf("%s: %v, want %v naming it", name, err, want)
		}
	}
	if _, err := d.OpenDir("link", false); !errors.Is(err, store.ErrUnsafe) {
		t.Errorf("a symlink opened as a directory: %v, want ErrUnsafe", err)
	}
	if data, err := d.ReadFile("file"); err != nil || string(data) != "x" {
		t.Errorf("ReadFile = %q, %v", data, err)
	}
	// A create through the symlink would make its target: it must be
	// refused, and the target must not appear.
	if fd, err := d.OpenFile("link", unix.O_RDWR|unix.O_CREAT); !errors.Is(err, store.ErrUnsafe) {
		if err == nil {
			unix.Close(fd)
		}
		t.Errorf("a symlink opened to create: %v, want ErrUnsafe", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("followed the symlink: %v", err)
	}
	if err := d.ClearJunk("link"); !errors.Is(err, store.ErrUnsafe) {
		t.Errorf("ClearJunk of a symlink: %v, want ErrUnsafe", err)
	}
	for _, name := range []string{"dir", "fifo"} {
		if err := d.ClearJunk(name); err != nil {
			t.Errorf("ClearJunk(%s): %v", name, err)
		}
	}
	if err := d.ClearJunk("file"); !errors.Is(err, ErrNoJunk) {
		t.Errorf("ClearJunk of a regular file: %v, want ErrNoJunk", err)
	}
}

func TestAFileOverTheBoundIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	d := beside(t, dir, false)
	os.WriteFile(filepath.Join(dir, "big"), make([]byte, MaxFileSize+1), 0o600)
	if _, err := d.ReadFile("big"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("a file over %d bytes: %v, want ErrCorrupt", MaxFileSize, err)
	}
}

// Beside a store: a directory group or others can write is refused unless
// sticky, whoever owns it; a file there must be the caller's, unless only
// looking.
func TestBesideAStore(t *testing.T) {
	for mode, refused := range map[uint32]bool{0o700: false, 0o755: false, 0o775: true, 0o777: true, 0o1777: false} {
		dir := filepath.Join(t.TempDir(), "d")
		os.Mkdir(dir, 0o700)
		unix.Chmod(dir, mode)
		d, err := OpenBeside(dir, false)
		if refused != errors.Is(err, store.ErrUnsafe) {
			t.Errorf("mode %#o: %v", mode, err)
		}
		d.Close()
		d, err = OpenBeside(dir, true)
		if err != nil {
			t.Errorf("mode %#o, only looking: %v", mode, err)
		}
		d.Close()
	}
	if os.Geteuid() != 0 {
		t.Skip("a file of another user needs root to make")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "theirs")
	os.WriteFile(path, []byte("x"), 0o600)
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := beside(t, dir, false).ReadFile("theirs"); !errors.Is(err, store.ErrUnsafe) || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("another user's file: %v, want ErrUnsafe naming its owner", err)
	}
	if data, err := beside(t, dir, true).ReadFile("theirs"); err != nil || string(data) != "x" {
		t.Errorf("another user's file, only looking: %q, %v", data, err)
	}
}

// WriteAtomic replaces a file whole and leaves nothing behind when it
// cannot.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	d := beside(t, dir, false)
	for _, data := range []string{"first", "second, longer"} {
		if _, err := d.WriteAtomic("f", []byte(data), WriteOpts{Durable: true}); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != data {
			t.Fatalf("after writing %q: %q", data, b)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "f")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := d.WriteAtomic("f", nil, WriteOpts{NoReplace: true}); !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), filepath.Join(dir, "f")) {
		t.Errorf("NoReplace over an existing file: %v, want EEXIST naming it", err)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o700)
	if _, err := d.WriteAtomic("sub", []byte("x"), WriteOpts{}); err == nil {
		t.Error("replaced a directory")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, TempPrefix+"*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// ProbeFD sees an exclusive lock, never another probe, and leaves no lock
// behind.
func TestProbe(t *testing.T) {
	dir := t.TempDir()
	d := beside(t, dir, false)
	fd, err := d.WriteAtomic("l", nil, WriteOpts{Locked: true})
	if err != nil {
		t.Fatal(err)
	}
	if held, err := d.ProbeLock("l"); !held || err != nil {
		t.Fatalf("probe of a held lock: %v, %v", held, err)
	}
	unix.Close(fd)
	p, _ := d.OpenFile("l", unix.O_RDONLY)
	defer unix.Close(p)
	if held, err := ProbeFD(p, "l"); held || err != nil {
		t.Fatalf("probe of a free lock: %v, %v", held, err)
	}
	other, _ := d.OpenFile("l", unix.O_RDONLY)
	defer unix.Close(other)
	if err := unix.Flock(other, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("the probe left a lock behind: %v", err)
	}
	if held, _ := d.ProbeLock("missing"); held {
		t.Fatal("a missing file is held")
	}
}
