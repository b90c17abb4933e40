package etcdstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store"
)

// A renewal sends its compare without waiting for its keep-alive's answer
// (Lease.Renew), and still fails, with ErrLost, when the lease is alive
// but the holder key is gone (etcdctl del) or is another key of the same
// name on the same lease (deleted and put again: a new create revision);
// a renewal of a lease whose kept keep-alive stream was closed still
// succeeds, on a new stream.
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
	before := store.BootTime()
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
}
