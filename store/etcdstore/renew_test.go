package etcdstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/store"
)

// A renewal sends its compare without waiting for its keep-alive's answer
// (Lease.Renew), and still fails, with ErrLost, when the lease is alive
// but the holder key is gone (etcdctl del) or is another key of the same
// name on the same lease (deleted and put again: a new create revision);
// a renewal of a lease whose kept keep-alive stream was closed still
// succeeds, on a new stream; one with the cluster gone names it.
func TestRenewComparesTheHolderKey(t *testing.T) {
	s, c := newStore(t)
	cl := c.Client()
	renew := func(l store.Lease) error {
		_, err := l.Renew(t.Context())
		return err
	}

	l := acquireNow(t, s, "rk", store.Claim{Name: "t", TTL: 10 * time.Second})
	if err := renew(l); err != nil {
		t.Fatalf("first renewal: %v", err)
	}
	before := boottime.Now()
	term, err := l.Renew(t.Context())
	if err != nil {
		t.Fatalf("second renewal, on the kept stream: %v", err)
	}
	if term.Start < before || term.TTL < 9*time.Second {
		t.Errorf("renewal term %+v: want a start after %v and the lease's TTL", term, before)
	}
	// A stream the client closed under the keeper: the next renewal opens
	// another.
	l.(*Lease).ka.cancel()
	if err := renew(l); err != nil {
		t.Errorf("renewal after its stream was closed: %v", err)
	}
	if err := renew(l); err != nil {
		t.Errorf("renewal on the reopened stream: %v", err)
	}

	myKey := l.(*Lease).myKey
	if _, err := cl.Delete(t.Context(), myKey); err != nil {
		t.Fatal(err)
	}
	if err := renew(l); !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("renewal after the holder key was deleted, its lease alive: %v; want ErrLost, deleted", err)
	}
	// The same name put again on the same lease: the compare is on the
	// create revision, not on the name or the lease.
	if _, err := cl.Put(t.Context(), myKey, "", clientv3.WithLease(l.(*Lease).id)); err != nil {
		t.Fatal(err)
	}
	if err := renew(l); !errors.Is(err, store.ErrLost) {
		t.Errorf("renewal after the holder key was replaced on its lease: %v; want ErrLost", err)
	}

	// An ended context fails the renewal: neither answer is taken for one.
	l2 := acquireNow(t, s, "rk2", store.Claim{Name: "t", TTL: 10 * time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := l2.Renew(ctx); err == nil {
		t.Error("a renewal with an ended context succeeded")
	}
	if err := renew(l2); err != nil {
		t.Errorf("renewal after one with an ended context: %v", err)
	}

	// A cluster gone: the renewal fails, not as a lost lease, naming the
	// endpoint (E6). A store of its own with a short dial timeout, and
	// the other leases released first, so that nothing waits long on the
	// dead cluster.
	short, err := Open(Options{Endpoints: []string{c.Endpoints()}, DialTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { short.Close() })
	l3 := acquireNow(t, short, "rk3", store.Claim{Name: "t", TTL: 10 * time.Second})
	if err := renew(l3); err != nil {
		t.Fatalf("renewal before the cluster went: %v", err)
	}
	for _, l := range []store.Lease{l, l2} {
		l.Release(t.Context())
	}
	c.Members[0].Kill()
	err = renew(l3)
	if err == nil || errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), c.Endpoints()) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("renewal with the cluster gone: %v; want an error naming %s and why (connection refused), not ErrLost", err, c.Endpoints())
	}
	t.Logf("renewal with the cluster gone: %v", err)
}
