package resident

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

func TestTwoStoresInOneDirectoryAreTwoRoles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := mustAcquire(t, filepath.Join(dir, "a.db"), Claim{})
	b := mustAcquire(t, filepath.Join(dir, "b.db"), Claim{})
	if a.Key() != filepath.Join(dir, "a.db") || b.Key() != filepath.Join(dir, "b.db") {
		t.Fatalf("keys %q, %q", a.Key(), b.Key())
	}
	for _, name := range []string{"a.db.resident.lock", "b.db.resident.lock"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	// The store files themselves were never created.
	if _, err := os.Stat(filepath.Join(dir, "a.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("store file created: %v", err)
	}
}

func TestSecondAcquireIsRefusedNamingTheHolder(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	h := startHolder(t, "hold", storePath, "", "")

	r, ref, err := Acquire(context.Background(), storePath, Claim{})
	if err != nil || r != nil || ref == nil {
		t.Fatalf("Acquire = %v, %v, %v; want a refusal", r, ref, err)
	}
	if ref.Holder.PID != h.pid || ref.Holder.Fence != h.fence || ref.Holder.Name != "helper" || ref.Holder.Host == "" {
		t.Errorf("refusal names %+v, want pid %d fence %d", ref.Holder, h.pid, h.fence)
	}
	if ref.Reason != ReasonNotNewer || ref.Store != storePath {
		t.Errorf("refusal %+v", ref)
	}
	if s := ref.String(); !strings.Contains(s, "pid "+strconv.Itoa(h.pid)) || !strings.Contains(s, storePath) {
		t.Errorf("refusal says %q", s)
	}

	st := mustStatus(t, storePath)
	if st.State != store.Held || st.Holder == nil || st.Holder.PID != h.pid || st.Store != storePath {
		t.Fatalf("status %+v", st)
	}
	if st.Holder.Marker != "" {
		t.Errorf("status shows the marker")
	}
	if code := h.exit(); code != 0 {
		t.Fatalf("helper exited %d", code)
	}
	if st := mustStatus(t, storePath); st.State != store.Free || st.Holder != nil {
		t.Fatalf("after release: %+v", st)
	}
}

func TestStandbyTakesTheRoleWhenReleased(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	h := startHolder(t, "hold", storePath, "", "")

	logs := newLogLines()
	type result struct {
		r   *Role
		ref *Refusal
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	go func() {
		r, ref, err := Acquire(ctx, storePath, Claim{Claim: store.Claim{Wait: true}, Logger: logs.logger()})
		done <- result{r, ref, err}
	}()
	logs.waitFor(t, "waiting as a standby")
	select {
	case res := <-done:
		t.Fatalf("standby returned while the role was held: %+v", res)
	default:
	}
	if code := h.exit(); code != 0 {
		t.Fatalf("helper exited %d", code)
	}
	res := <-done
	if res.err != nil || res.ref != nil {
		t.Fatalf("standby: %v, %v", res.ref, res.err)
	}
	defer res.r.Release(context.Background())
	if res.r.Fence() != h.fence+1 {
		t.Errorf("fence %d after %d", res.r.Fence(), h.fence)
	}
	if p := res.r.Predecessor(); p != nil {
		t.Errorf("a clean release left a predecessor: %+v", p)
	}
	if st := mustStatus(t, storePath); st.Holder == nil || st.Holder.PID != os.Getpid() {
		t.Errorf("status after take-over: %+v", st)
	}
}

// The same, with the holder in this process: no pidfd fires, only the
// events of the release itself wake the standby.
func TestStandbyTakesTheRoleFromAnInProcessRelease(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	holder := mustAcquire(t, storePath, Claim{})
	logs := newLogLines()
	done := make(chan *Role, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		r, _, err := Acquire(ctx, storePath, Claim{Claim: store.Claim{Wait: true}, Logger: logs.logger()})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	logs.waitFor(t, "waiting as a standby")
	released := time.Now()
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r == nil {
		t.Fatal("standby did not take the role")
	}
	t.Logf("handoff after release: %v", time.Since(released))
	r.Release(context.Background())
}

func TestStandbyEndsWithItsContext(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	holder := mustAcquire(t, storePath, Claim{})
	logs := newLogLines()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		r, ref, err := Acquire(ctx, storePath, Claim{Claim: store.Claim{Wait: true}, Logger: logs.logger()})
		if r != nil || ref != nil {
			t.Errorf("standby got %v, %v", r, ref)
		}
		done <- err
	}()
	logs.waitFor(t, "waiting as a standby")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
			t.Fatalf("standby ended with %v", err)
		}
	case <-time.After(guard):
		t.Fatal("standby did not end with its context")
	}
	if _, err := holder.Renew(context.Background()); err != nil {
		t.Fatalf("holder disturbed: %v", err)
	}
}

func TestFlockUtilitySeesTheRole(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	lock := storePath + ".resident.lock"
	r := mustAcquire(t, storePath, Claim{})
	if err := exec.Command("/usr/bin/flock", "-n", lock, "true").Run(); err == nil {
		t.Fatal("flock -n succeeded while the role is held")
	}
	if err := r.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/bin/flock", "-n", lock, "true").CombinedOutput(); err != nil {
		t.Fatalf("flock -n after release: %v %s", err, out)
	}
}

func TestKilledHolderLeavesAStalePayloadThatIsIgnored(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	h := startHolder(t, "hold", storePath, "", "marker-of-the-dead")
	h.Cmd.Process.Signal(syscall.SIGKILL)
	if code := h.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("helper exited %d", code)
	}
	// Its payload is still there, and still names it...
	data, err := os.ReadFile(storePath + ".resident.lock")
	if err != nil || !strings.Contains(string(data), `"pid":`+strconv.Itoa(h.pid)) {
		t.Fatalf("stale payload: %q, %v", data, err)
	}
	// ...but the lock is not held, so the role is free (R2).
	if st := mustStatus(t, storePath); st.State != store.Free || st.Holder != nil {
		t.Fatalf("status of a dead holder's role: %+v", st)
	}
	r := mustAcquire(t, storePath, Claim{})
	p := r.Predecessor()
	if p == nil || p.Marker != "marker-of-the-dead" || p.PID != h.pid || p.Fence != h.fence {
		t.Fatalf("predecessor %+v, want the dead helper's", p)
	}
	if r.Fence() <= h.fence {
		t.Fatalf("fence %d after the dead holder's %d", r.Fence(), h.fence)
	}
}

func TestFencesStrictlyIncrease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	storePath := filepath.Join(dir, "app.db")
	var last uint64
	for range 5 {
		r := mustAcquire(t, storePath, Claim{})
		if r.Fence() <= last {
			t.Fatalf("fence %d after %d", r.Fence(), last)
		}
		last = r.Fence()
		if err := r.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if f := reserved(t, storePath); f < last {
		t.Fatalf("the fence file reserves up to %d, below the last token handed out, %d", f, last)
	}

	// A crash-like leftover: the fence file lost, a dead holder's payload
	// with a higher fence than it ever recorded. The next token is above both.
	os.Remove(storePath + ".resident.fence")
	stale := `{"schema":1,"pid":` + strconv.Itoa(deadPID(t)) + `,"host":"h","surface":"x","acquired_at":"2020-01-01T00:00:00Z","store":"` +
		storePath + `","build":{"mod_time":"0001-01-01T00:00:00Z","size":0},"fence":` + itoa(last+40) + `,"marker":"m"}`
	if err := os.WriteFile(storePath+".resident.lock", []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustAcquire(t, storePath, Claim{})
	if r.Fence() != last+41 {
		t.Fatalf("fence %d after a stale payload with %d", r.Fence(), last+40)
	}
	if p := r.Predecessor(); p == nil || p.Marker != "m" {
		t.Fatalf("predecessor %+v", p)
	}
}

func TestReaderNeverSeesAHalfWrittenPayload(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	r := mustAcquire(t, storePath, Claim{Claim: store.Claim{Name: "ticker"}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Alternate long and short payloads, so that every rewrite both
		// grows and shrinks the file.
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pid := 7
			if i%2 == 0 {
				pid = 1234567890
			}
			if err := r.SetCommand(t.Context(), store.ProcessID{ID: pid}, store.ProcessID{}); err != nil {
				t.Error(err)
				return
			}
			if err := r.Tick(context.Background(), time.Now()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var reads [3]int
	for i := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				st, err := Status(storePath)
				if err != nil {
					t.Error(err)
					return
				}
				if st.State != store.Held || st.Holder == nil || st.Holder.Fence != r.Fence() || st.Holder.Name != "ticker" {
					t.Errorf("read %+v (err %v)", st, st.Err)
					return
				}
				reads[i]++
			}
		}()
	}
	time.Sleep(2 * time.Second) // the length of the race, not a synchronisation
	close(stop)
	wg.Wait()
	t.Logf("reads: %v", reads)
	for _, n := range reads {
		if n < 100 {
			t.Errorf("only %d reads raced the writer", n)
		}
	}
}

func TestTickAndStuck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	watched := mustAcquire(t, filepath.Join(dir, "w.db"), Claim{StuckAfter: 5 * time.Minute})
	if st := mustStatus(t, watched.Key()); st.State != store.Held || !st.Holder.LastTick.IsZero() {
		t.Fatalf("never ticked: %+v", st)
	}
	long := time.Now().Add(-10 * time.Minute)
	if err := watched.Tick(context.Background(), long); err != nil {
		t.Fatal(err)
	}
	if st := mustStatus(t, watched.Key()); st.State != store.Stuck || !st.Holder.LastTick.Equal(long) {
		t.Fatalf("ticked 10m ago with stuck-after 5m: %+v", st)
	}
	now := time.Now()
	watched.Tick(context.Background(), now)
	if st := mustStatus(t, watched.Key()); st.State != store.Held || !st.Holder.LastTick.Equal(now) {
		t.Fatalf("ticked now: %+v", st)
	}

	unwatched := mustAcquire(t, filepath.Join(dir, "u.db"), Claim{})
	unwatched.Tick(context.Background(), long)
	if st := mustStatus(t, unwatched.Key()); st.State != store.Held {
		t.Fatalf("no stuck-after, ticked long ago: %+v", st)
	}
}

func TestReplacedLockFileLosesTheRole(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"unlink", "rename over"} {
		t.Run(how, func(t *testing.T) {
			storePath := filepath.Join(t.TempDir(), "app.db")
			r := mustAcquire(t, storePath, Claim{})
			if _, err := r.Renew(context.Background()); err != nil {
				t.Fatal(err)
			}
			lock := storePath + ".resident.lock"
			switch how {
			case "unlink":
				os.Remove(lock)
			case "rename over":
				os.WriteFile(lock+".new", released(t), 0o600)
				os.Rename(lock+".new", lock)
			}
			select {
			case <-r.Changes():
			case <-time.After(guard):
				t.Fatal("no change signalled")
			}
			if _, err := r.Check(context.Background()); !errors.Is(err, store.ErrLost) {
				t.Fatalf("Check = %v, want ErrLost", err)
			}
			if _, err := r.Renew(context.Background()); !errors.Is(err, store.ErrLost) {
				t.Fatalf("Renew = %v, want ErrLost", err)
			}
			// While the lost holder has not released (its command may still
			// be stopping), nobody takes the role; then anyone may.
			if r2, ref, err := Acquire(context.Background(), storePath, Claim{}); r2 != nil || err != nil || ref == nil || ref.Reason != ReasonHeld || !strings.Contains(ref.Detail, "moved or deleted") {
				t.Fatalf("Acquire beside the lost holder = %v, %v, %v; want refused as held", r2, ref, err)
			}
			r.Release(context.Background())
			mustAcquire(t, storePath, Claim{})
		})
	}
}

func TestReleaseTwiceAndAfterLoss(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	r := mustAcquire(t, storePath, Claim{})
	if err := r.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(context.Background()); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if _, err := r.Renew(context.Background()); !errors.Is(err, store.ErrLost) {
		t.Fatalf("Renew after release = %v", err)
	}
	if data, _ := os.ReadFile(storePath + ".resident.lock"); !emptyPayload(data) {
		t.Fatalf("payload after release: %q", data)
	}
}

// A standby behind a holder that is SIGKILLed takes the role, and learns
// whose leftovers to stop.
func TestStandbyTakesTheRoleOfAKilledHolder(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	h := startHolder(t, "hold", storePath, "", "leftovers")
	logs := newLogLines()
	done := make(chan *Role, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		r, _, err := Acquire(ctx, storePath, Claim{Claim: store.Claim{Wait: true}, Logger: logs.logger()})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	logs.waitFor(t, "waiting as a standby")
	h.Cmd.Process.Signal(syscall.SIGKILL)
	r := <-done
	if r == nil {
		t.Fatal("standby did not take the role")
	}
	defer r.Release(context.Background())
	if p := r.Predecessor(); p == nil || p.Marker != "leftovers" || p.PID != h.pid {
		t.Fatalf("predecessor %+v", p)
	}
}

// A lock file another user owns is not used (S9), though status may read it.
func TestForeignLockFileIsNotTrusted(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	storePath := filepath.Join(t.TempDir(), "app.db")
	lock := storePath + ".resident.lock"
	os.WriteFile(lock, released(t), 0o600)
	if err := os.Chown(lock, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Acquire(context.Background(), storePath, Claim{}); !errors.Is(err, store.ErrUnsafe) || !strings.Contains(err.Error(), lock) {
		t.Fatalf("Acquire = %v", err)
	}
	if st := mustStatus(t, storePath); st.State != store.Free {
		t.Fatalf("status %+v", st)
	}
}

// released is a released role's lock file, as fencerun makes a new one.
func released(t *testing.T) []byte {
	t.Helper()
	b, err := statefs.WholeSlots(nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// emptyPayload reports whether a lock file's content is a released role's.
func emptyPayload(data []byte) bool {
	_, empty, err := decodePayload(data, "lock")
	return err == nil && empty
}
