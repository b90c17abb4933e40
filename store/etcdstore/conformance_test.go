package etcdstore

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
	"github.com/fencerun/fencerun/store/storetest"
)

func TestMain(m *testing.M) {
	if eps, ok := os.LookupEnv(envSlotHelper); ok {
		os.Exit(slotHelper(eps)) // slots_test.go
	}
	storetest.Main(m, openEndpoints)
}

func openEndpoints(eps string) (store.Store, error) {
	return Open(Options{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second})
}

// newStore is a store on a fresh one-member cluster of its own.
func newStore(t *testing.T) (*Store, *etcdtest.Cluster) {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	s, err := openEndpoints(c.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Store), c
}

// The etcd backend runs the suite unchanged. A dead holder or waiter is
// known dead once its lease expires: the TTL, and etcd's expiry sweep
// (every 500ms). The TTL is a second above MinTTL: the cases renew by
// hand, and on a loaded machine a few steps between two renewals (a
// List, a Prune) took over 2 s, and the lease was gone.
func TestConformance(t *testing.T) {
	const ttl = MinTTL + time.Second
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) (store.Store, string) {
			s, c := newStore(t)
			return s, c.Endpoints()
		},
		Open:      openEndpoints,
		TTL:       ttl,
		DeadAfter: ttl + time.Second,
		Many:      true,
	})
}
