package filestore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fencerun/fencerun/internal/statefs"
)

// Resident roles this root has seen (SPEC list): a resident run notes its
// store's path in <root>/residents/<hash of the path>, so that list can
// show the role beside the keys. The role itself lives beside its store
// (package resident); this is only a list of where to look.

const residentsDir = "residents"

// NoteResident records that a resident role of the store at storePath (an
// absolute real path) runs under this root. Writing it again is a no-op.
func (s *Store) NoteResident(storePath string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	d, err := s.top.OpenDir(residentsDir, true)
	if err != nil {
		return err
	}
	defer d.Close()
	sum := sha256.Sum256([]byte(storePath))
	name := "r-" + hex.EncodeToString(sum[:16])
	if data, err := d.ReadFile(name); err == nil && string(data) == storePath+"\n" {
		return nil
	}
	_, err = d.WriteAtomic(name, []byte(storePath+"\n"), statefs.WriteOpts{})
	return err
}

// Residents lists the store paths of the resident roles this root has
// seen, sorted.
func (s *Store) Residents() ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	d, err := s.top.OpenDir(residentsDir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.List()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range names {
		if !strings.HasPrefix(name, "r-") {
			continue
		}
		data, err := d.ReadFile(name)
		p := strings.TrimSuffix(string(data), "\n")
		if err != nil || !filepath.IsAbs(p) {
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}
