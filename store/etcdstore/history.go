package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store"
)

// A key's history (N2) is one side key a holding, on no lease, outside
// the lock prefix K/ (etcdctl never counts it): _fencerun/history/K#F, F
// the holding's fence (its holder key's create revision) in 20 digits, so
// that the keys sort as the holdings began ('#' is in no key: K's history
// never mixes with K/x's). The value is the store.Holding as JSON, written
// once when the lease is taken (after the take: the fence is the take's
// own revision, which no transaction knows before it commits) and once
// more with its end: by the holder, in the transaction that deletes its
// holder key and compared on it, or, for a lease already lost, only if
// the end is not written yet (version 1); by Revoke, the same way. The
// start's put reads the number of the key's holdings in the same request
// and drops the oldest beyond store.MaxHistory. A holding without an end
// whose holder key is gone reads EndUnknown.

// historyPrefix is the start of every history key of key.
func historyPrefix(key string) string { return side + "history/" + key + "#" }

// historyKey is the side key of key's holding with fence.
func historyKey(key string, fence int64) string {
	return historyPrefix(key) + fmt.Sprintf("%020d", fence)
}

// holding is the lease's holding as History shows it, with e as its end
// if not nil.
func (l *Lease) holding(e *store.Ending) store.Holding {
	h := store.Holding{Fence: uint64(l.rev), Name: l.desc.Name, PID: l.desc.PID, Host: l.desc.Host,
		Reason: l.desc.Reason, Start: l.desc.Acquired.UTC(), Ending: e}
	if l.slotKey != "" && l.slot >= 0 { // a shared holder's slot is internal
		slot := l.slot
		h.Slot = &slot
	}
	h = h.Bounded()
	if e != nil {
		h.End = time.Now().UTC()
	}
	return h
}

func holdingPut(key string, fence int64, h store.Holding) clientv3.Op {
	data, _ := json.Marshal(h) // plain data: cannot fail
	return clientv3.OpPut(historyKey(key, fence), string(data))
}

// historyStarted writes the lease's holding, and drops the key's oldest
// holdings beyond MaxHistory. A failure is only logged: the lease is what
// matters.
func (s *Store) historyStarted(ctx context.Context, l *Lease) {
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).Then(holdingPut(l.key, l.rev, l.holding(nil)),
		clientv3.OpGet(historyPrefix(l.key), clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
	if err != nil {
		s.log.Warn("could not write the holding to the key's history", "key", l.key, "error", s.fail("history", err))
		return
	}
	extra := resp.Responses[1].GetResponseRange().Count - store.MaxHistory
	if extra <= 0 {
		return
	}
	old, err := s.c.Get(octx, historyPrefix(l.key), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(extra))
	if err == nil && len(old.Kvs) > 0 {
		last := string(old.Kvs[len(old.Kvs)-1].Key)
		_, err = s.c.Delete(octx, historyPrefix(l.key), clientv3.WithRange(last+"\x00"))
	}
	if err != nil {
		s.log.Warn("could not drop the key's oldest holdings", "key", l.key, "error", s.fail("history", err))
	}
}

// endUnlessEnded writes the end of the holding at hk, if it has none yet
// (its start is the only write it had).
func (s *Store) endUnlessEnded(ctx context.Context, hk string, put clientv3.Op) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	_, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.Version(hk), "=", 1)).Then(put).Commit()
	if err != nil {
		return s.fail("history", err)
	}
	return nil
}

// Ended keeps how the holding ended for the release to write.
func (l *Lease) Ended(e store.Ending) {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	l.ending = &e
}

// endPut is the write of the lease's holding with its end, as Ended said,
// else released.
func (l *Lease) endPut() clientv3.Op {
	l.endMu.Lock()
	e := store.Ending{How: store.EndReleased}
	if l.ending != nil {
		e = *l.ending
	}
	l.endMu.Unlock()
	return holdingPut(l.key, l.rev, l.holding(&e))
}

// History reads key's holdings (see store.Store), in one request with
// its contenders, which tell the holdings still running.
func (s *Store) History(ctx context.Context, key string, limit int) ([]store.Holding, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > store.MaxHistory {
		limit = store.MaxHistory
	}
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).Then(
		clientv3.OpGet(historyPrefix(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(limit))),
		clientv3.OpGet(prefixOf(key), clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return nil, s.fail("history of "+key, err)
	}
	running := map[uint64]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		running[uint64(kv.CreateRevision)] = true
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	slices.Reverse(kvs) // oldest first
	return parseHistory(kvs, running)
}

func parseHistory(kvs []*mvccpb.KeyValue, running map[uint64]bool) ([]store.Holding, error) {
	out := make([]store.Holding, 0, len(kvs))
	for _, kv := range kvs {
		var h store.Holding
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, kv.Key, err)
		}
		if h.Ending == nil && !running[h.Fence] {
			h.Ending = &store.Ending{How: store.EndUnknown}
		}
		out = append(out, h)
	}
	if len(out) > store.MaxHistory {
		out = out[len(out)-store.MaxHistory:]
	}
	return out, nil
}

// ForgetHistory drops a free key's history (see store.Store): only when
// no contender holds or waits for it.
func (s *Store) ForgetHistory(ctx context.Context, key string) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	octx, cancel := s.op(ctx)
	defer cancel()
	// No contender: the compare that the prefix's last key was created
	// before revision 1, which only an empty prefix passes.
	none := clientv3.Compare(clientv3.CreateRevision(prefixOf(key)).WithPrefix(), "=", 0)
	resp, err := s.c.Txn(octx).If(none).Then(clientv3.OpDelete(historyPrefix(key), clientv3.WithPrefix())).Commit()
	if err != nil {
		return false, s.fail("forget the history of "+key, err)
	}
	return resp.Succeeded && resp.Responses[0].GetResponseDeleteRange().Deleted > 0, nil
}

// historyRevoked writes, if it has none yet, the end of key's holding
// with fence: revoked, by this process.
func (s *Store) historyRevoked(ctx context.Context, key string, fence int64) error {
	hk := historyKey(key, fence)
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, hk)
	if err != nil || len(resp.Kvs) == 0 {
		return err
	}
	hs, err := parseHistory(resp.Kvs, map[uint64]bool{uint64(fence): true})
	if err != nil || !store.Finished(hs, uint64(fence), time.Now().UTC(), store.Ending{How: store.EndRevoked, By: store.Revoker(s.host)}) {
		return err
	}
	_, err = s.c.Txn(octx).If(clientv3.Compare(clientv3.Version(hk), "=", 1)).Then(holdingPut(key, fence, hs[0])).Commit()
	return err
}
