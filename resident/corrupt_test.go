package resident

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/store"
)

// lockWithFlock holds flock(LOCK_EX) on path with flock(1) until the test
// ends: a lock held by something that is not a resident.
func lockWithFlock(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command("/usr/bin/flock", path, "sh", "-c", "echo locked; exec cat")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("flock(1): %q, %v", line, err)
	}
}

func TestHeldRoleWithAnUnreadablePayload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content string }{
		{"garbage", "\x00\x01 not json"},
		{"truncated", `{"schema":1,"pid":1,"host":"h","surf`},
		{"unknown schema", `{"schema":99,"pid":1,"host":"h","acquired_at":"2020-01-01T00:00:00Z","fence":3}`},
		{"no pid", `{"schema":1,"host":"h","acquired_at":"2020-01-01T00:00:00Z","fence":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			storePath := filepath.Join(t.TempDir(), "app.db")
			lock := storePath + ".resident.lock"
			if err := os.WriteFile(lock, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			lockWithFlock(t, lock)
			st := mustStatus(t, storePath)
			if st.State != store.Corrupt || !errors.Is(st.Err, store.ErrCorrupt) || !strings.Contains(st.Err.Error(), lock) {
				t.Fatalf("status %+v (%v)", st, st.Err)
			}
			r, ref, err := Acquire(context.Background(), storePath, Claim{})
			if r != nil || ref != nil || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), lock) {
				t.Fatalf("Acquire = %v, %v, %v; want ErrCorrupt naming %s", r, ref, err, lock)
			}
			if data, _ := os.ReadFile(lock); string(data) != tc.content {
				t.Fatalf("corrupt payload overwritten: %q", data)
			}
		})
	}
}

// A lock taken by something that never announced a holder: status says
// held with no holder; Acquire gives it time to settle, then refuses.
func TestHeldRoleWithNoPayload(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	lock := storePath + ".resident.lock"
	os.WriteFile(lock, nil, 0o600)
	lockWithFlock(t, lock)
	if st := mustStatus(t, storePath); st.State != store.Held || st.Holder != nil {
		t.Fatalf("status %+v", st)
	}
	r, ref, err := Acquire(context.Background(), storePath, Claim{})
	if r != nil || err != nil || ref == nil || ref.Reason != ReasonHeld || ref.Holder.PID != 0 {
		t.Fatalf("Acquire = %v, %+v, %v", r, ref, err)
	}
}

// A corrupt payload fails closed like a corrupt key record (S6, B4): it may
// have named a dead holder's leftovers. Before, it was silently overwritten
// and the command started. release --resident --force clears it.
func TestUnlockedGarbageFailsClosed(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	lock := storePath + ".resident.lock"
	os.WriteFile(lock, []byte("garbage{"), 0o600)
	if st := mustStatus(t, storePath); st.State != store.Corrupt || st.Err == nil || !strings.Contains(st.Err.Error(), lock) {
		t.Fatalf("status %+v", st)
	}
	if r, ref, err := Acquire(context.Background(), storePath, Claim{}); r != nil || ref != nil || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), lock) {
		t.Fatalf("Acquire over garbage = %v, %v, %v; want ErrCorrupt naming %s", r, ref, err, lock)
	}
	if b, _ := os.ReadFile(lock); string(b) != "garbage{" {
		t.Fatalf("the corrupt payload was overwritten: %q", b)
	}
	if had, _, err := Revoke(storePath); !had || err != nil {
		t.Fatalf("Revoke = %v, %v", had, err)
	}
	r := mustAcquire(t, storePath, Claim{})
	if r.Predecessor() != nil {
		t.Fatalf("predecessor from garbage: %+v", r.Predecessor())
	}
	if st := mustStatus(t, storePath); st.State != store.Held || st.Holder.PID != os.Getpid() {
		t.Fatalf("status after acquire: %+v", st)
	}
}

func TestWrongThingsInPlaceOfTheLockFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		plant func(lock string) error
		want  error
	}{
		{"directory", func(lock string) error { return os.Mkdir(lock, 0o700) }, store.ErrCorrupt},
		{"symlink", func(lock string) error { return os.Symlink(lock+".target", lock) }, store.ErrUnsafe},
		{"fifo", func(lock string) error { return exec.Command("mkfifo", lock).Run() }, store.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			storePath := filepath.Join(t.TempDir(), "app.db")
			lock := storePath + ".resident.lock"
			if err := tc.plant(lock); err != nil {
				t.Fatal(err)
			}
			st := mustStatus(t, storePath)
			if st.State != store.Corrupt || !errors.Is(st.Err, tc.want) || !strings.Contains(st.Err.Error(), lock) {
				t.Fatalf("status %+v (%v)", st, st.Err)
			}
			if _, _, err := Acquire(context.Background(), storePath, Claim{}); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), lock) {
				t.Fatalf("Acquire: %v", err)
			}
			if _, err := os.Lstat(lock + ".target"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("followed the symlink: %v", err)
			}
		})
	}
}

func TestCorruptFenceFileFailsClosed(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	fence := storePath + ".resident.fence"
	os.WriteFile(fence, []byte("{"), 0o600)
	r, ref, err := Acquire(context.Background(), storePath, Claim{})
	if r != nil || ref != nil || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), fence) {
		t.Fatalf("Acquire = %v, %v, %v", r, ref, err)
	}
	if st := mustStatus(t, storePath); st.State != store.Free {
		t.Fatalf("role left locked: %+v", st)
	}
}

func TestMissingDirectory(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "nope", "app.db")
	if _, _, err := Acquire(context.Background(), storePath, Claim{}); err == nil || !strings.Contains(err.Error(), storePath+".resident.lock") {
		t.Fatalf("Acquire = %v", err)
	}
	if st := mustStatus(t, storePath); st.State != store.Free {
		t.Fatalf("status %+v", st)
	}
}
