package resident

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fencerun/fencerun/internal/statefs"
)

// reserved is what the role's fence file reserves: no token above it has
// been handed out.
func reserved(t *testing.T, storePath string) uint64 {
	t.Helper()
	path := storePath + ".resident.fence"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := statefs.ParseSlotted(raw, path)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Reserved uint64 }
	if err := json.Unmarshal(cur.Data, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r.Reserved
}

// slottedFile writes content as a slotted file (internal/statefs) at path.
func slottedFile(t *testing.T, path, content string) {
	t.Helper()
	f, err := statefs.WholeSlots([]byte(content), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f, 0o600); err != nil {
		t.Fatal(err)
	}
}

// takeRole acquires and releases the role once and returns its fence.
func takeRole(t *testing.T, storePath string) uint64 {
	t.Helper()
	r := mustAcquire(t, storePath, Claim{})
	if err := r.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	return r.Fence()
}

// S4 across the change of fence allocator: the fence file an earlier
// fencerun wrote (the last token it handed out, as plain JSON) is a floor;
// no token at or below it is handed out again, and the next reservation
// makes it a slotted file that covers every token since.
func TestAnEarlierFencerunsFenceFileIsAFloor(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	fence := storePath + ".resident.fence"
	if err := os.WriteFile(fence, []byte(`{"schema":1,"fence":500}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := takeRole(t, storePath); got != 501 {
		t.Fatalf("first token over an earlier fence file of 500: %d, want 501", got)
	}
	if got := takeRole(t, storePath); got != 502 {
		t.Fatalf("second token: %d, want 502", got)
	}
	if r := reserved(t, storePath); r < 502 {
		t.Fatalf("the fence file reserves up to %d, below 502", r)
	}
	// An earlier fencerun's file with a stale payload above it: above both.
	if err := os.WriteFile(fence, []byte(`{"schema":1,"fence":900}`), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(fence + "-next") // a store the earlier fencerun ran on alone
	if got := takeRole(t, storePath); got != 901 {
		t.Fatalf("token over an earlier fence file of 900: %d, want 901", got)
	}
}

// After a reboot (a counter and reservation of another boot) the next
// token is above the whole reservation: the crash may have lost counts up
// to it. Within the boot, tokens are consecutive again.
func TestRoleFencesSkipTheReservationAfterAReboot(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	first := takeRole(t, storePath)
	if got := takeRole(t, storePath); got != first+1 {
		t.Fatalf("same boot: token %d after %d, want %d", got, first, first+1)
	}
	slottedFile(t, storePath+".resident.fence", `{"schema":1,"reserved":1000,"boot":"a-boot-before-a-crash"}`)
	slottedFile(t, storePath+".resident.fence-next", `{"schema":1,"next":7,"reserved":1000,"boot":"a-boot-before-a-crash"}`)
	if got := takeRole(t, storePath); got != 1001 {
		t.Fatalf("after a reboot: token %d, want 1001", got)
	}
	if got := takeRole(t, storePath); got != 1002 {
		t.Fatalf("then: token %d, want 1002", got)
	}
	if r := reserved(t, storePath); r < 1002 {
		t.Fatalf("the fence file reserves up to %d, below 1002", r)
	}
}

// A holder SIGKILLed between reserving its token and announcing it (so no
// payload names the token) costs a token, never repeats one: also as the
// first holder of a new boot, and with the counter lost too.
func TestAHolderKilledBetweenReserveAndUse(t *testing.T) {
	t.Parallel()
	storePath := filepath.Join(t.TempDir(), "app.db")
	for range 3 {
		takeRole(t, storePath)
	}
	killed := func() uint64 {
		t.Helper()
		h := startReserver(t, storePath)
		n, err := strconv.ParseUint(h.Expect("reserved "), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if code := h.ExitCode(); code != 137 {
			t.Fatalf("reserver exited %d, want killed by SIGKILL", code)
		}
		return n
	}
	n := killed()
	if got := takeRole(t, storePath); got <= n {
		t.Fatalf("token %d after a holder died holding %d", got, n)
	}
	slottedFile(t, storePath+".resident.fence", `{"schema":1,"reserved":64,"boot":"before-the-crash"}`)
	slottedFile(t, storePath+".resident.fence-next", `{"schema":1,"next":4,"reserved":64,"boot":"before-the-crash"}`)
	n = killed()
	if n != 65 {
		t.Fatalf("first token of the new boot %d, want 65", n)
	}
	if got := takeRole(t, storePath); got <= n {
		t.Fatalf("token %d after the new boot's first holder died holding %d", got, n)
	}
	os.Remove(storePath + ".resident.fence-next")
	n = killed()
	if got := takeRole(t, storePath); got <= n {
		t.Fatalf("token %d after a holder died holding %d, the counter lost", got, n)
	}
}
