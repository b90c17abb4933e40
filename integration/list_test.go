package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/filestore"
)

// TestListIsBuffered lists 300 keys and counts the write(2) calls
// to stdout (P6, issue 21): the table was written cell by cell, twelve
// writes a key; buffered it is a handful for the whole table.
func TestListIsBuffered(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("no strace")
	}
	t.Parallel()
	s := newSandbox(t)
	const keys = 300
	fs, err := filestore.Open(s.state, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		l, _, err := fs.Acquire(context.Background(), fmt.Sprintf("k%04d", i), store.Claim{Name: "populate", TTL: time.Minute})
		if err != nil || l == nil {
			t.Fatalf("acquire k%04d: %v, %v", i, l, err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	fs.Close()
	trace := s.path("list.strace")
	c := exec.Command("strace", "-f", "-e", "trace=write", "-o", trace, bin, "list")
	c.Env = append(os.Environ(), "FENCERUN_DIR="+s.state)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("fencerun list: %v", err)
	}
	if rows := strings.Count(string(out), "\n"); rows != keys+1 {
		t.Fatalf("fencerun list printed %d lines, want %d", rows, keys+1)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	writes := strings.Count(string(b), "write(1,")
	if writes > 10 {
		t.Errorf("fencerun list of %d keys made %d writes to stdout, want at most 10", keys, writes)
	}
}
