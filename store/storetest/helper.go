package storetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
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

// helper waits for the lease, says "acquired FENCE", keeps it renewed until
// stdin closes, releases and says "released". Errors are "error MESSAGE".
func helper(open func(string) (store.Store, error), desc string) int {
	s, err := open(desc)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	ctx := context.Background()
	l, _, err := s.Acquire(ctx, os.Getenv(envKey), store.Claim{
		Name: "helper", TTL: ttl, Wait: true, Marker: os.Getenv(envMarker),
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("acquired", l.Fence())
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
	for {
		select {
		case <-eof:
			if err := l.Release(ctx); err != nil {
				fmt.Println("error", err)
				return 1
			}
			fmt.Println("released")
			return 0
		case <-time.After(ttl / 3):
			if _, err := l.Renew(ctx); err != nil {
				fmt.Println("error", err)
				return 1
			}
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
	return &proc{testsupport.StartHelper(t, envHelper+"="+desc, envKey+"="+key, envMarker+"="+marker, envTTL+"="+b.TTL.String()), t}
}

// acquired waits for the helper to hold the lease and returns its fence.
func (p *proc) acquired(within time.Duration) uint64 {
	p.t.Helper()
	f, err := strconv.ParseUint(p.ExpectWithin("acquired ", within), 10, 64)
	if err != nil {
		p.t.Fatal(err)
	}
	return f
}

// release closes the helper's stdin and waits for it to release.
func (p *proc) release() {
	p.t.Helper()
	p.Stdin.Close()
	p.Expect("released")
}
