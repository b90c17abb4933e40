package etcdhop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWanted(t *testing.T) {
	t.Setenv("FENCERUN_ETCD", "")
	os.Unsetenv("FENCERUN_ETCD")
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"--etcd", "http://a:1", "status", "k"}, true},
		{[]string{"run", "--etcd=http://a:1", "--key", "k", "--", "true"}, true},
		{[]string{"run", "--key", "k", "--", "sh", "--etcd", "x"}, false}, // the command's own
		{[]string{"--etcdx", "status"}, false},
		{nil, false},
	} {
		if got := Wanted(tt.args); got != tt.want {
			t.Errorf("Wanted(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
	t.Setenv("FENCERUN_ETCD", "http://e:1")
	if !Wanted([]string{"status", "k"}) {
		t.Error("FENCERUN_ETCD set: not wanted")
	}
}

// TestFindPrefersTheHelperBesideFencerun: the helper beside the running
// executable wins over one in PATH; with neither, the error says how to
// install it.
func TestFind(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(filepath.Dir(self), Helper)
	if _, err := os.Stat(beside); err == nil {
		t.Skipf("%s exists; the test would remove it", beside)
	}
	inPath := t.TempDir()
	t.Setenv("PATH", inPath)
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "from a clone of fencerun, go install ./cmd/...") {
		t.Errorf("no helper anywhere: %v, want how to install it", err)
	}
	script := []byte("#!/bin/sh\nexit 0\n")
	if err := os.WriteFile(filepath.Join(inPath, Helper), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(); err != nil || got != filepath.Join(inPath, Helper) {
		t.Errorf("helper in PATH: Find() = %q, %v", got, err)
	}
	if err := os.WriteFile(beside, script, 0o755); err != nil {
		t.Skipf("cannot write beside the test binary: %v", err)
	}
	defer os.Remove(beside)
	if got, err := Find(); err != nil || got != beside {
		t.Errorf("helper beside and in PATH: Find() = %q, %v; want %s", got, err, beside)
	}
}
