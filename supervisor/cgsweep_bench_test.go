package supervisor

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkSweepCgroups is the sweep a run does once, after its start, of
// the hierarchy's own directory (as it is on this machine).
func BenchmarkSweepCgroups(b *testing.B) {
	h, err := FindHierarchy()
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		if _, err := h.Sweep(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSweepCgroupsNone is the sweep of a directory that holds no
// cgroup but the run's own: the P1 bench's, on a machine of its own.
func BenchmarkSweepCgroupsNone(b *testing.B) {
	h, err := FindHierarchy()
	if err != nil {
		b.Skip(err)
	}
	dir := h.NewPath()
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Skip(err)
	}
	defer os.Remove(dir)
	own := h.NewPath()
	own = filepath.Join(dir, filepath.Base(own))
	if err := os.Mkdir(own, 0o755); err != nil {
		b.Fatal(err)
	}
	defer os.Remove(own)
	for b.Loop() {
		if _, err := SweepCgroups(dir); err != nil {
			b.Fatal(err)
		}
	}
}
