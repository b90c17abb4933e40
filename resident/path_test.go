package resident

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// R1: a store path reached through symlinks is the role of its real path:
// a link to the store file, or a linked directory, is not a second role.
func TestSymlinkedStoreIsOneRole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	storePath := filepath.Join(dir, "app.db")
	if err := os.WriteFile(storePath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink("app.db", link); err != nil {
		t.Fatal(err)
	}
	linkedDir := filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(dir, linkedDir); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, "hold", storePath, "", "")
	for _, p := range []string{link, filepath.Join(linkedDir, "app.db"), filepath.Join(linkedDir, "link.db")} {
		r, ref, err := Acquire(context.Background(), p, Claim{})
		if err != nil || r != nil || ref == nil {
			t.Fatalf("Acquire(%s) = %v, %v, %v; want a refusal", p, r, ref, err)
		}
		if ref.Holder.PID != h.pid || ref.Store != storePath {
			t.Errorf("Acquire(%s) refused by %+v for %s, want pid %d for %s", p, ref.Holder, ref.Store, h.pid, storePath)
		}
		if st := mustStatus(t, p); st.State != store.Held || st.Store != storePath {
			t.Errorf("status of %s: %+v", p, st)
		}
	}
	if _, err := os.Lstat(link + ".resident.lock"); !os.IsNotExist(err) {
		t.Errorf("a lock file beside the link: %v", err)
	}
	if code := h.exit(); code != 0 {
		t.Fatalf("helper exited %d", code)
	}
}

func TestStorePathNamingADirectoryIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, p := range []string{dir, dir + "/", filepath.Join(dir, "sub") + "/"} {
		if _, err := StorePath(p); err == nil || !strings.Contains(err.Error(), "names a directory") {
			t.Errorf("StorePath(%q) = %v", p, err)
		}
		if _, _, err := Acquire(context.Background(), p, Claim{}); err == nil {
			t.Errorf("Acquire(%q) took a role", p)
		}
	}
	if _, err := os.Lstat(dir + ".resident.lock"); !os.IsNotExist(err) {
		t.Errorf("a lock file in the parent: %v", err)
	}
	// A link to a store not created yet is the role of its target.
	dangling := filepath.Join(dir, "dangling.db")
	os.Symlink("missing.db", dangling)
	if p, err := StorePath(dangling); err != nil || p != filepath.Join(dir, "missing.db") {
		t.Errorf("StorePath(dangling) = %q, %v", p, err)
	}
	loop := filepath.Join(dir, "loop.db")
	os.Symlink("loop.db", loop)
	if _, err := StorePath(loop); err == nil {
		t.Error("StorePath(a symlink loop) succeeded")
	}
}

// R4: a store directory that others can write (without the sticky bit) is
// refused, as for keys; a sticky one is fine.
func TestStoreDirectoryOthersCanWriteIsRefused(t *testing.T) {
	t.Parallel()
	for mode, refused := range map[uint32]bool{0o777: true, 0o775: true, 0o1777: false, 0o755: false} {
		dir := filepath.Join(t.TempDir(), "d")
		os.Mkdir(dir, 0o700)
		if err := unix.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		r, ref, err := Acquire(context.Background(), filepath.Join(dir, "app.db"), Claim{})
		if refused != errors.Is(err, store.ErrUnsafe) || refused && !strings.Contains(err.Error(), dir) {
			t.Errorf("mode %#o: Acquire = %v, %v, %v", mode, r, ref, err)
		}
		if r != nil {
			r.Release(context.Background())
		}
	}
}

// R8: standbys are shown as waiters by Status, oldest first, and leave no
// trace once they stop waiting.
func TestStandbysAreWaiters(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	holder := mustAcquire(t, storePath, Claim{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, name := range []string{"first", "second"} {
		go func() {
			_, _, err := Acquire(ctx, storePath, Claim{Claim: store.Claim{Name: name, Reason: "standing by", Wait: true}})
			done <- err
		}()
		var st *store.Status
		for deadline := time.Now().Add(guard); ; {
			st = mustStatus(t, storePath)
			if len(st.Waiters) > 0 && st.Waiters[len(st.Waiters)-1].Name == name {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("standby %s never shown: %+v", name, st.Waiters)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	st := mustStatus(t, storePath)
	if len(st.Waiters) != 2 || st.Waiters[0].Name != "first" || st.Waiters[1].Reason != "standing by" || st.Waiters[0].PID != os.Getpid() {
		t.Fatalf("waiters %+v", st.Waiters)
	}
	cancel()
	<-done
	<-done
	if st := mustStatus(t, storePath); len(st.Waiters) != 0 {
		t.Fatalf("standbys left behind: %+v", st.Waiters)
	}
	holder.Release(context.Background())
	if m, _ := filepath.Glob(storePath + ".resident.wait-*"); len(m) != 0 {
		t.Fatalf("files left behind: %v", m)
	}
}
