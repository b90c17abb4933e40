package resident

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencerun/fencerun/store"
)

// BuildOf returns the build identity of the program at path (R4): path
// itself, absolute but with its symlinks not followed (so that a deploy that
// swaps /opt/app/current is still the same program), and the mtime and size
// of the file it finally resolves to, and the VCS revision from its Go build
// information when it is a Go binary stamped with one (else the revision is
// empty). path is the command's executable already resolved through PATH,
// or --build.
func BuildOf(path string) (store.Build, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return store.Build{}, fmt.Errorf("resident: build of %s: %w", path, err)
	}
	path = abs
	fi, err := os.Stat(path)
	if err != nil {
		return store.Build{}, fmt.Errorf("resident: build of %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return store.Build{}, fmt.Errorf("resident: build of %s: not a regular file", path)
	}
	b := store.Build{Path: path, ModTime: fi.ModTime(), Size: fi.Size()}
	// Not a Go binary, or one built without build info: no revision, which
	// is only a label anyway.
	if info, err := buildinfo.ReadFile(path); err == nil {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				b.Revision = s.Value
			}
		}
	}
	return b, nil
}

// isStamped reports whether b identifies an executable at all: a build whose
// mtime is unknown is unstamped.
func isStamped(b store.Build) bool { return !b.ModTime.IsZero() }

// isNewer reports whether build b is strictly newer than build than (R4).
// Only a build of the same program can be: the same Path (a build without
// one is never newer, nor is anything newer than it). The mtime decides. Builds with the same mtime are never newer than each other,
// whatever their size or revision: those only tell a same-second rebuild
// apart (see Same), they cannot order it, and an order that went both ways
// would hand the role back and forth. An unstamped build is never newer, and
// nothing is newer than an unstamped build: there is nothing to compare.
func isNewer(b, than store.Build) bool {
	if !isStamped(b) || !isStamped(than) || b.Path == "" || b.Path != than.Path {
		return false
	}
	return b.ModTime.After(than.ModTime)
}

// Same reports whether a and b are the same build: same mtime, size and
// revision.
func Same(a, b store.Build) bool {
	return a.Path == b.Path && a.ModTime.Equal(b.ModTime) && a.Size == b.Size && a.Revision == b.Revision
}

// describeBuild is a build as messages show it.
func describeBuild(b *store.Build) string {
	if b == nil || !isStamped(*b) {
		return "unstamped build"
	}
	s := fmt.Sprintf("build of %s, %d bytes", b.ModTime.UTC().Format("2006-01-02T15:04:05.999999999Z"), b.Size)
	if b.Path != "" {
		s = store.Printable(b.Path) + " " + s
	}
	if b.Revision != "" {
		s += ", revision " + b.Revision
	}
	return s
}
