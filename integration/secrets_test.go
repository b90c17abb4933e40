package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// S9: the lease token is never printed by status, list or logs, at any log
// level or format.
func TestTokenNeverShown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	ready, release := filepath.Join(dir, "ready"), filepath.Join(dir, "release")
	var holderLog strings.Builder
	holder := fencerun(state, "--log-level", "trace", "--log-format", "json", "run", "--key", "secret", "--",
		"sh", "-c", `touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done; fencerun tick`, ready, release)
	holder.Env = append(holder.Env, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	holder.Stdout, holder.Stderr = &holderLog, &holderLog
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, ready)

	b, err := readLeaseRecord(filepath.Join(state, "keys", "k-secret", "lease"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || len(rec.Token) != 32 {
		t.Fatalf("no 128-bit token in the record to look for (%v): %s", err, b)
	}

	var shown strings.Builder
	for _, args := range [][]string{
		{"status", "secret"}, {"status", "secret", "--json"}, {"list"}, {"list", "--json"},
		{"--log-level", "trace", "cancel", "secret"}, {"--log-level", "trace", "--log-format", "json", "prune", "--json"},
	} {
		out, err := fencerun(state, append([]string{"--log-level", "trace"}, args...)...).CombinedOutput()
		if err != nil {
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("%v: %v", args, err)
			}
		}
		shown.Write(out)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, holder); code != 77 && code != 0 {
		t.Errorf("holder exit %d, want 77 (cancelled) or 0", code)
	}
	all := shown.String() + holderLog.String()
	if !strings.Contains(all, "secret") {
		t.Fatalf("the outputs do not even name the key; nothing was checked:\n%s", all)
	}
	if strings.Contains(all, rec.Token) {
		t.Fatalf("the lease token appears in status, list or logs:\n%s", all)
	}
}
