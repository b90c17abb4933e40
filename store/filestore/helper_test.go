package filestore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/storetest"
)

// The test binary doubles as the helper process that tests need where
// liveness is the point: it holds, waits for or writes a lease as a real
// process that a test can stop or kill.
const (
	helperMode   = "FILESTORE_TEST_HELPER" // hold, stopguard, fsize, loop, slot or many
	helperRoot   = "FILESTORE_TEST_ROOT"
	helperKey    = "FILESTORE_TEST_KEY"
	helperMarker = "FILESTORE_TEST_MARKER"
	helperWait   = "FILESTORE_TEST_WAIT"
	helperSlots  = "FILESTORE_TEST_SLOTS"  // the claim's Slots
	helperShared = "FILESTORE_TEST_SHARED" // 1: a shared claim
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperMode); mode != "" {
		os.Exit(runHelper(mode))
	}
	storetest.Main(m, openRoot)
}

// runHelper runs one helper mode. It says what happened on stdout, one
// line at a time: "acquired FENCE", "busy", "released", "error MESSAGE".
func runHelper(mode string) int {
	s, err := Open(os.Getenv(helperRoot), Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	key := os.Getenv(helperKey)
	claim := store.Claim{Name: "helper", TTL: time.Hour, Wait: os.Getenv(helperWait) != "0", Marker: os.Getenv(helperMarker)}
	claim.Slots, _ = strconv.Atoi(os.Getenv(helperSlots))
	claim.Shared = os.Getenv(helperShared) == "1"
	ctx := context.Background()
	switch mode {
	case "slot", "many":
		return runManyHelper(mode, s, key, claim)
	case "hold":
		// Acquire, say so, hold until stdin closes, release.
		l, _, err := s.Acquire(ctx, key, claim)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		if l == nil {
			fmt.Println("busy")
			return 0
		}
		fmt.Println("acquired", l.Fence())
		io.Copy(io.Discard, os.Stdin)
		if err := l.Release(ctx); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("released")
		return 0
	case "stopguard":
		// Lock the key's guard as a store call does, say so, and stop
		// (as SIGSTOP stops a wrapper inside a renewal); once continued,
		// hold it until stdin closes.
		fd, err := unix.Open(filepath.Join(os.Getenv(helperRoot), "keys", encodeKey(key), guardFile), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Flock(fd, unix.LOCK_EX)
		}
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("locked")
		unix.Kill(os.Getpid(), unix.SIGSTOP)
		io.Copy(io.Discard, os.Stdin)
		return 0
	case "crash":
		// Die by SIGKILL in the middle of a write: before the rename of a
		// key's first record (FILESTORE_TEST_CUT=rename), or in the
		// renewal after the acquisition, FILESTORE_TEST_CUT bytes into
		// the slot.
		die := func() {
			unix.Kill(unix.Getpid(), unix.SIGKILL)
			select {} // SIGKILL cannot be caught
		}
		cut := os.Getenv("FILESTORE_TEST_CUT")
		if cut == "rename" {
			statefs.BeforeRename = die
		}
		l, _, err := s.Acquire(ctx, key, claim)
		if err != nil || l == nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("acquired", l.Fence())
		n, _ := strconv.Atoi(cut)
		statefs.SlotWrite = func(fd int, b []byte, off int64) (int, error) {
			unix.Pwrite(fd, b[:min(n, len(b))], off)
			die()
			return 0, nil
		}
		_, err = l.Renew(ctx)
		fmt.Println("error renewed", err)
		return 1
	case "fsize":
		// Acquire with writes to files limited to one byte.
		lim := unix.Rlimit{Cur: 1, Max: 1}
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
			fmt.Println("error setrlimit", err)
			return 1
		}
		l, _, err := s.Acquire(ctx, key, claim)
		if err != nil {
			fmt.Println("error", err)
			return 0
		}
		fmt.Println("acquired", l.Fence())
		return 0
	case "loop":
		// Take the lease again and again; inside, a marker file made with
		// O_EXCL proves nobody else is inside too.
		n, _ := strconv.Atoi(os.Getenv("FILESTORE_TEST_LOOPS"))
		inside := filepath.Join(os.Getenv("FILESTORE_TEST_SCRATCH"), "inside")
		for range n {
			l, _, err := s.Acquire(ctx, key, claim)
			if err != nil {
				fmt.Println("error", err)
				return 1
			}
			f, err := os.OpenFile(inside, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				fmt.Println("error overlap:", err)
				return 1
			}
			f.Close()
			if err := os.Remove(inside); err != nil {
				fmt.Println("error", err)
				return 1
			}
			if err := l.Release(ctx); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("done")
		return 0
	}
	fmt.Println("error unknown mode", mode)
	return 2
}

// spawn starts a helper process in mode on the store at root, for key.
func spawn(t *testing.T, mode, root, key string, env ...string) *testsupport.Helper {
	t.Helper()
	return testsupport.StartHelper(t, append([]string{helperMode + "=" + mode, helperRoot + "=" + root, helperKey + "=" + key}, env...)...)
}
