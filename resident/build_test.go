package resident

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
)

func TestNewer(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	b := func(mt time.Time, size int64, rev string) store.Build {
		return store.Build{Path: "/usr/local/bin/worker", ModTime: mt, Size: size, Revision: rev}
	}
	for _, tc := range []struct {
		name     string
		b, than  store.Build
		newer    bool
		same     bool
		stampedB bool
	}{
		{"zero values", store.Build{}, store.Build{}, false, true, false},
		{"unstamped vs stamped", store.Build{}, b(t0, 10, ""), false, false, false},
		{"stamped vs unstamped", b(t0, 10, ""), store.Build{}, false, false, true},
		{"identical", b(t0, 10, "abc"), b(t0, 10, "abc"), false, true, true},
		{"a second later", b(t0.Add(time.Second), 10, ""), b(t0, 10, ""), true, false, true},
		{"a nanosecond later", b(t0.Add(time.Nanosecond), 10, ""), b(t0, 10, ""), true, false, true},
		{"a second earlier", b(t0.Add(-time.Second), 10, ""), b(t0, 10, ""), false, false, true},
		{"later but smaller", b(t0.Add(time.Second), 5, ""), b(t0, 10, ""), true, false, true},
		{"same mtime, different size", b(t0, 11, ""), b(t0, 10, ""), false, false, true},
		{"same mtime, different size, other way", b(t0, 10, ""), b(t0, 11, ""), false, false, true},
		{"same mtime and size, different revision", b(t0, 10, "def"), b(t0, 10, "abc"), false, false, true},
		{"earlier with a revision", b(t0.Add(-time.Second), 10, "zzz"), b(t0, 10, ""), false, false, true},
		{"same instant, other zone", b(t0.In(time.FixedZone("x", 3600)), 10, ""), b(t0, 10, ""), false, true, true},
	} {
		if got := isNewer(tc.b, tc.than); got != tc.newer {
			t.Errorf("%s: Newer = %v, want %v", tc.name, got, tc.newer)
		}
		if got := Same(tc.b, tc.than); got != tc.same {
			t.Errorf("%s: Same = %v, want %v", tc.name, got, tc.same)
		}
		if got := isStamped(tc.b); got != tc.stampedB {
			t.Errorf("%s: Stamped = %v, want %v", tc.name, got, tc.stampedB)
		}
		// Never both ways: that would hand the role back and forth.
		if isNewer(tc.b, tc.than) && isNewer(tc.than, tc.b) {
			t.Errorf("%s: newer both ways", tc.name)
		}
	}
}

func TestBuildOf(t *testing.T) {
	older, mid, _ := progs(t)
	b := buildOf(t, mid)
	fi, err := os.Stat(mid)
	if err != nil {
		t.Fatal(err)
	}
	if !b.ModTime.Equal(fi.ModTime()) || b.Size != fi.Size() || b.Size == 0 {
		t.Fatalf("BuildOf = %+v, file %v %d", b, fi.ModTime(), fi.Size())
	}
	// Built here with -buildvcs=false, so no revision: but it parsed.
	t.Logf("revision of a Go binary: %q", b.Revision)
	if !isNewer(b, buildOf(t, older)) {
		t.Fatal("a build one second later is not newer")
	}

	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o700)
	if sb := buildOf(t, script); sb.Revision != "" || sb.Size != 18 || !isStamped(sb) {
		t.Fatalf("BuildOf(script) = %+v", sb)
	}
	// A symlink is the program's path (not followed: a deploy swapping
	// /opt/app/current stays the same program); mtime and size are its
	// target's.
	link := filepath.Join(dir, "link")
	os.Symlink(mid, link)
	lb, err := BuildOf(link)
	if err != nil || lb.Path != link || !lb.ModTime.Equal(b.ModTime) || lb.Size != b.Size {
		t.Fatalf("BuildOf(symlink) = %+v, %v; want path %s and the target's %+v", lb, err, link, b)
	}
	if raw, _ := BuildOf(mid); raw.Path != mid {
		t.Fatalf("BuildOf(%s).Path = %q", mid, raw.Path)
	}
	if _, err := BuildOf(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("BuildOf(missing) succeeded")
	}
	if _, err := BuildOf(dir); err == nil {
		t.Fatal("BuildOf(directory) succeeded")
	}
}

// R4: only a build of the same program can be newer. An unrelated program
// with a later mtime (a freshly written debug-peek script) is not, nor is a
// build that does not say which program it is.
func TestOnlyTheSameProgramIsNewer(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	worker := store.Build{Path: "/usr/local/bin/app-worker", ModTime: t0, Size: 10}
	for _, tc := range []struct {
		name string
		b    store.Build
		want bool
	}{
		{"the same program, rebuilt", store.Build{Path: worker.Path, ModTime: t0.Add(time.Hour), Size: 11}, true},
		{"another program, newer", store.Build{Path: "/tmp/debug-peek", ModTime: t0.Add(time.Hour), Size: 11}, false},
		{"a program of unknown path, newer", store.Build{ModTime: t0.Add(time.Hour), Size: 11}, false},
	} {
		if got := isNewer(tc.b, worker); got != tc.want {
			t.Errorf("%s: Newer = %v, want %v", tc.name, got, tc.want)
		}
		if tc.want {
			continue
		}
		if why := notNewer(tc.b, worker); !strings.Contains(why, "a different program") {
			t.Errorf("%s: refused because %q", tc.name, why)
		}
	}
	if isNewer(worker, store.Build{ModTime: t0.Add(-time.Hour), Size: 9}) {
		t.Error("newer than a holder whose program is unknown")
	}
}
