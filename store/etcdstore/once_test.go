package etcdstore

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store"
)

// A holder whose lease expired has no holder key left to compare on: its
// ReleaseDone marks nothing (O4), even though its own lease and client
// are fine otherwise; the next holder's does.
func TestOnceExpiredHolderMarksNothing(t *testing.T) {
	s, _ := newStore(t)
	l := acquireNow(t, s, "o", store.Claim{Name: "expired", TTL: MinTTL})
	// Never renewed: wait for etcd to expire the lease and delete the key.
	deadline := time.Now().Add(30 * time.Second) // a failure guard
	for {
		resp, err := s.c.Get(t.Context(), l.(*Lease).myKey)
		if err == nil && len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder's lease never expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := l.ReleaseDone(t.Context(), "id"); !errors.Is(err, store.ErrLost) {
		t.Errorf("ReleaseDone after the lease expired = %v, want ErrLost", err)
	}
	if d, err := s.Done(t.Context(), "o"); err != nil || len(d) != 0 {
		t.Fatalf("done after an expired holder's ReleaseDone = %+v, %v; want none", d, err)
	}
	l2 := acquireNow(t, s, "o", store.Claim{Name: "next"})
	if err := l2.ReleaseDone(t.Context(), "id"); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Done(t.Context(), "o"); err != nil || len(d) != 1 || d[0].Fence != l2.Fence() {
		t.Fatalf("done = %+v, %v; want id by fence %d", d, err, l2.Fence())
	}
}

// The done IDs live outside the lock prefix: an etcdctl lock on the key
// is not kept waiting by them (E1), and once-reset empties them.
func TestOnceSideKeyOutsideTheLockPrefix(t *testing.T) {
	s, c := newStore(t)
	l := acquireNow(t, s, "o", store.Claim{Name: "x"})
	if err := l.ReleaseDone(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	resp, err := s.c.Get(t.Context(), "o/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys under the lock prefix o/ after a release: %d, %v", resp.Count, err)
	}
	out, err := exec.Command("etcdctl", "--endpoints", c.Endpoints(), "lock", "o", "true").CombinedOutput()
	if err != nil {
		t.Fatalf("etcdctl lock o true with a done ID: %v: %s", err, out)
	}
	if ok, err := s.Reopen(t.Context(), "o", "a"); !ok || err != nil {
		t.Fatalf("Reopen = %v, %v", ok, err)
	}
	if d, _ := s.Done(t.Context(), "o"); len(d) != 0 {
		t.Fatalf("done after Reopen = %+v", d)
	}
	if !strings.HasPrefix(doneKey("o"), side) {
		t.Fatalf("the done key %s is not under %s", doneKey("o"), side)
	}
}

// A done key that cannot be read fails closed, naming it; once-reset
// clears it.
func TestOnceCorruptDoneKey(t *testing.T) {
	s, _ := newStore(t)
	if _, err := s.c.Put(t.Context(), doneKey("o"), "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Done(t.Context(), "o"); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), doneKey("o")) {
		t.Errorf("Done = %v; want ErrCorrupt naming %s", err, doneKey("o"))
	}
	if ok, err := s.Reopen(t.Context(), "o", "x"); !ok || err != nil {
		t.Fatalf("Reopen = %v, %v; want true, nil", ok, err)
	}
	if d, err := s.Done(t.Context(), "o"); err != nil || len(d) != 0 {
		t.Fatalf("Done after the reset = %v, %v", d, err)
	}
}
