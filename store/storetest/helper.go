package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/store"
)

// The test binary doubles as the helper process: a holder or waiter that
// the suite can SIGKILL, so that "a holder died" is a real death on every
// backend (a dropped kernel lock, an etcd lease nobody keeps alive).
const (
	envHelper = "STORETEST_HELPER" // the store's description
	envKey    = "STORETEST_KEY"
	envMarker = "STORETEST_MARKER"
	envTTL    = "STORETEST_TTL"
	envSlots  = "STORETEST_SLOTS"  // the claim's Slots
	envShared = "STORETEST_SHARED" // "1": a shared claim
)

// Main is the backend test package's TestMain body: in a helper process
// started by the suite it holds a lease on the store that open opens from
// its description, and exits; otherwise it runs the tests.
func Main(m *testing.M, open func(desc string) (store.Store, error)) {
	if desc, ok := os.LookupEnv(envHelper); ok {
		os.Exit(helper(open, desc))
	}
	os.Exit(m.Run())
}

// helper waits for the lease, says "acquired FENCE SLOT", and keeps it
// renewed until stdin closes; then it releases and says "released". A line
// "renew" on stdin renews at once, said "renewed". It says "cancel
// requested" once when asked to stop, and "lost" (then releases and exits)
// when the lease is revoked. Errors are "error MESSAGE".
func helper(open func(string) (store.Store, error), desc string) int {
	s, err := open(desc)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	slots, _ := strconv.Atoi(os.Getenv(envSlots))
	ctx := context.Background()
	l, _, err := s.Acquire(ctx, os.Getenv(envKey), store.Claim{
		Name: "helper", TTL: ttl, Wait: true, Marker: os.Getenv(envMarker),
		Slots: slots, Shared: os.Getenv(envShared) == "1",
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("acquired", l.Fence(), l.Slot())
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return keep(ctx, l, ttl, lines)
}

// keep renews l until stdin closes or l is lost, saying what happens.
func keep(ctx context.Context, l store.Lease, ttl time.Duration, lines <-chan string) int {
	cancelled := false
	for {
		var err error
		select {
		case line, ok := <-lines:
			if !ok {
				if err := l.Release(ctx); err != nil {
					fmt.Println("error", err)
					return 1
				}
				fmt.Println("released")
				return 0
			}
			if line == "renew" {
				if _, err = l.Renew(ctx); err == nil {
					fmt.Println("renewed")
				}
			}
		case <-l.Changes():
			var req store.Request
			if req, err = l.Check(ctx); err == nil && req == store.RequestCancel && !cancelled {
				cancelled = true
				fmt.Println("cancel requested")
			}
		case <-time.After(ttl / 3):
			_, err = l.Renew(ctx)
		}
		if errors.Is(err, store.ErrLost) {
			fmt.Println("lost")
			l.Release(ctx)
			return 0
		}
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
}

// proc is a helper process.
type proc struct {
	*testsupport.Helper
	t *testing.T
}

// spawn starts a helper that waits for key on the store desc describes.
func (b *Backend) spawn(t *testing.T, desc, key, marker string) *proc {
	t.Helper()
	return b.spawnKind(t, desc, key, marker, 0, false)
}

// spawnKind is spawn with a claim of slots, or a shared one.
func (b *Backend) spawnKind(t *testing.T, desc, key, marker string, slots int, shared bool) *proc {
	t.Helper()
	env := []string{envHelper + "=" + desc, envKey + "=" + key, envMarker + "=" + marker, envTTL + "=" + b.TTL.String(),
		envSlots + "=" + strconv.Itoa(slots)}
	if shared {
		env = append(env, envShared+"=1")
	}
	return &proc{testsupport.StartHelper(t, env...), t}
}

// acquired waits for the helper to hold the lease and returns its fence.
func (p *proc) acquired(within time.Duration) uint64 {
	p.t.Helper()
	f, _ := p.acquiredSlot(within)
	return f
}

// acquiredSlot waits for the helper to hold the lease and returns its
// fence and slot.
func (p *proc) acquiredSlot(within time.Duration) (uint64, int) {
	p.t.Helper()
	fence, slot, _ := strings.Cut(p.ExpectWithin("acquired ", within), " ")
	f, err := strconv.ParseUint(fence, 10, 64)
	if err != nil {
		p.t.Fatal(err)
	}
	n, err := strconv.Atoi(slot)
	if err != nil {
		p.t.Fatal(err)
	}
	return f, n
}

// renewed has the helper renew at once, and fails unless it still holds.
func (p *proc) renewed() {
	p.t.Helper()
	if _, err := io.WriteString(p.Stdin, "renew\n"); err != nil {
		p.t.Fatal(err)
	}
	p.Expect("renewed")
}

// release closes the helper's stdin and waits for it to release.
func (p *proc) release() {
	p.t.Helper()
	p.Stdin.Close()
	p.Expect("released")
}
