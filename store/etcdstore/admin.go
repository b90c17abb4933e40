package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store"
)

// contenders reads every key under key's prefix, oldest first: the holder,
// then the waiters, as concurrency.Mutex orders them.
func (s *Store) contenders(ctx context.Context, key string) ([]*mvccpb.KeyValue, error) {
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, prefixOf(key), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, s.fail("read "+prefixOf(key), err)
	}
	return resp.Kvs, nil
}

// Status reads one key (see store.Store): its holder and waiters, with the
// descriptions of fencerun's and the lease's remaining time as expiry.
// Contenders that are not fencerun's (etcdctl lock) are shown too.
func (s *Store) Status(ctx context.Context, key string) (*store.Status, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, err
	}
	kvs, err := s.contenders(ctx, key)
	if err != nil {
		return nil, err
	}
	return s.status(ctx, key, kvs)
}

func (s *Store) status(ctx context.Context, key string, kvs []*mvccpb.KeyValue) (*store.Status, error) {
	st := &store.Status{Key: key, State: store.Free, Holders: []store.Holder{}, Waiters: []store.Holder{}}
	if err := s.leftovers(ctx, st, waiting(key, kvs)); err != nil {
		return nil, err
	}
	if len(kvs) == 0 {
		return st, nil
	}
	hs, err := s.describeAll(ctx, kvs)
	if err != nil {
		return nil, err
	}
	held, waiters := holders(hs)
	for i := range held {
		if id := clientv3.LeaseID(kvs[i].Lease); id != 0 {
			octx, cancel := s.op(ctx)
			ttl, err := s.c.TimeToLive(octx, id)
			cancel()
			// TTL is whole seconds: 0 is under a second left, -1 gone.
			if err == nil && ttl.TTL >= 0 {
				held[i].Expires = time.Now().Add(time.Duration(ttl.TTL) * time.Second)
			}
		}
	}
	// By slot (one not yet claimed last), shared holders by fence: the
	// order they were read in.
	slices.SortStableFunc(held, func(a, b store.Holder) int {
		return cmp.Compare(slotOrder(a), slotOrder(b))
	})
	st.State, st.Holders, st.Waiters = store.Held, held, waiters
	if held[0].Kind == store.KindExclusive {
		h := held[0]
		st.Holder = &h
	}
	return st, nil
}

// slotOrder sorts holders by slot, and one without a slot after.
func slotOrder(h store.Holder) int {
	if h.Slot == nil {
		return store.MaxSlots
	}
	return *h.Slot
}

// leftovers fills st.Leftovers from the key's leftover records, except
// those of live contenders (the holder's own, and its waiters') and
// another host's queued ones, which are no dead holder's leftovers here
// either (see predecessor).
func (s *Store) leftovers(ctx context.Context, st *store.Status, live map[string]bool) error {
	octx, cancel := s.op(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, leftoversOf(st.Key), clientv3.WithPrefix())
	if err != nil {
		return s.fail("read leftovers of "+st.Key, err)
	}
	for _, kv := range resp.Kvs {
		if r, ok := parseLeftover(kv); ok && !live[string(kv.Key)] && isLeftoverOf(st.Key, kv.Key) && (!r.Queued || r.Host == s.host) {
			st.Leftovers = append(st.Leftovers, bound(r, s.host, string(kv.Key)).tree())
		}
	}
	return nil
}

// List reads every lock on the cluster, fencerun's and etcdctl lock's
// alike, and every free key whose Status has leftovers, sorted by name: every key
// "NAME/<hex>" attached to the lease <hex> is a contender for NAME. A nested key "a/b/<lease>" is listed
// under "a/b" (and blocks "a" too, which Status of "a" shows).
func (s *Store) List(ctx context.Context) ([]store.Status, error) {
	octx, cancel := s.op(ctx)
	resp, err := s.c.Get(octx, "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	cancel()
	if err != nil {
		return nil, s.fail("list keys", err)
	}
	byName := map[string][]*mvccpb.KeyValue{}
	kept := map[string]bool{} // free keys with a history (history.go), listed as the file backend lists them
	for _, kv := range resp.Kvs {
		if name, ok := lockName(kv); ok {
			byName[name] = append(byName[name], kv)
		} else if rest, ok := strings.CutPrefix(string(kv.Key), side+"history/"); ok {
			if i := strings.LastIndexByte(rest, '#'); i > 0 && !kept[rest[:i]] {
				kept[rest[:i]] = true
				if _, seen := byName[rest[:i]]; !seen {
					byName[rest[:i]] = nil
				}
			}
		} else if rest, ok := strings.CutPrefix(string(kv.Key), side+"leftovers/"); ok {
			// A free key whose dead holder left a tree is listed too.
			if i := strings.LastIndexByte(rest, '/'); i > 0 {
				if _, seen := byName[rest[:i]]; !seen {
					byName[rest[:i]] = nil
				}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]store.Status, 0, len(names))
	for _, n := range names {
		st, err := s.status(ctx, n, byName[n])
		if err != nil {
			st = &store.Status{Key: n, State: store.Corrupt, Waiters: []store.Holder{}, Err: err}
		} else if byName[n] == nil && len(st.Leftovers) == 0 && !kept[n] {
			// Only records status leaves out (another host's queued
			// ones): free, as a key never used, which has no row.
			continue
		}
		out = append(out, *st)
	}
	return out, nil
}

// lockName is the lock a key contends for, if it is a lock contender: its
// last element is the hex of the lease it is attached to.
func lockName(kv *mvccpb.KeyValue) (string, bool) {
	k := string(kv.Key)
	i := strings.LastIndexByte(k, '/')
	if kv.Lease == 0 || i <= 0 || strings.HasPrefix(k, side) {
		return "", false
	}
	id, ok := parseLease(k[i+1:])
	return k[:i], ok && int64(id) == kv.Lease
}

// Revoke revokes the etcd lease of each holder w picks (release --force):
// its keys go (its slot key too), its watch sees the deletion, and the
// next waiters are admitted at once. A holder key on no lease is deleted
// instead.
func (s *Store) Revoke(ctx context.Context, key string, w store.Which) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	kvs, _, err := s.picked(ctx, key, w)
	if err != nil {
		return false, err
	}
	for _, h := range kvs {
		octx, cancel := s.op(ctx)
		if h.Lease == 0 {
			_, err = s.c.Delete(octx, string(h.Key))
		} else if _, err = s.c.Revoke(octx, clientv3.LeaseID(h.Lease)); errors.Is(err, rpctypes.ErrLeaseNotFound) {
			err = nil // it expired meanwhile
		}
		cancel()
		if err != nil {
			return false, s.fail("revoke "+string(h.Key), err)
		}
		if err := s.historyRevoked(ctx, key, h.CreateRevision); err != nil {
			s.log.Warn("could not write the revocation to the key's history", "key", key, "error", err)
		}
		s.log.Info("revoked", "key", key, "holder", string(h.Key), "fence", h.CreateRevision)
	}
	return len(kvs) > 0, nil
}

// picked reads key's holders and returns the contender keys of those w
// picks, with their descriptions.
func (s *Store) picked(ctx context.Context, key string, w store.Which) ([]*mvccpb.KeyValue, []store.Holder, error) {
	kvs, err := s.contenders(ctx, key)
	if err != nil || len(kvs) == 0 {
		return nil, nil, err
	}
	hs, err := s.describeAll(ctx, kvs)
	if err != nil {
		return nil, nil, err
	}
	held, _ := holders(hs)
	var (
		keys []*mvccpb.KeyValue
		out  []store.Holder
	)
	for i := range held {
		if w.Picks(&held[i]) {
			keys, out = append(keys, kvs[i]), append(out, held[i])
		}
	}
	return keys, out, nil
}

// Cancel puts a cancel request for each holder w picks, on the holder's
// lease, if its holder key is still the one read.
func (s *Store) Cancel(ctx context.Context, key string, w store.Which) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	kvs, _, err := s.picked(ctx, key, w)
	if err != nil {
		return false, err
	}
	asked := false
	for _, h := range kvs {
		id := clientv3.LeaseID(h.Lease)
		if id == 0 {
			return asked, fmt.Errorf("etcdstore: %s is on no lease: not a holder that can be asked to stop", h.Key)
		}
		octx, cancel := s.op(ctx)
		still := clientv3.Compare(clientv3.CreateRevision(string(h.Key)), "=", h.CreateRevision)
		resp, err := s.c.Txn(octx).If(still).Then(clientv3.OpPut(cancelKey(id), "", clientv3.WithLease(id))).Commit()
		cancel()
		if err != nil {
			return asked, s.fail("cancel "+string(h.Key), err)
		}
		asked = asked || resp.Succeeded
	}
	return asked, nil
}

// Prune revokes the leases of this host's contenders whose process is
// gone: dead waiters, and holders that died before their lease expired.
// Leftover records stay, but for those of dead waiters (pruneQueued):
// they are what the next holder stops. It never touches another host's
// contenders, nor one that is not fencerun's, and stops no process: the
// caller stops the trees dead holders left (fencerun prune takes each
// free key with leftovers, as its next holder would).
func (s *Store) Prune(ctx context.Context) ([]store.Pruned, error) {
	out := []store.Pruned{}
	octx, cancel := s.op(ctx)
	resp, err := s.c.Get(octx, side+"desc/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, s.fail("read descriptions", err)
	}
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	// Which key, and whether holding, each lease contends for.
	type role struct {
		key    string
		holder bool
	}
	kinds := map[string]kind{}
	for _, kv := range resp.Kvs {
		var d desc
		if json.Unmarshal(kv.Value, &d) == nil {
			kinds[strings.TrimPrefix(string(kv.Key), side+"desc/")] = kindOf(store.Holder{Kind: d.Kind, Slots: d.Slots})
		}
	}
	roles := map[string]role{}
	for _, st := range all {
		kvs, err := s.contenders(ctx, st.Key)
		if err != nil {
			return nil, err
		}
		queue := make([]kind, len(kvs))
		for i, kv := range kvs {
			if k, ok := kinds[leaseHex(clientv3.LeaseID(kv.Lease))]; ok {
				queue[i] = k
			} else {
				queue[i] = exclusive
			}
		}
		n := holding(queue)
		for i, kv := range kvs {
			roles[leaseHex(clientv3.LeaseID(kv.Lease))] = role{st.Key, i < n}
		}
	}
	for _, kv := range resp.Kvs {
		var d desc
		if json.Unmarshal(kv.Value, &d) != nil || d.Host != s.host || alive(d.PID) {
			continue
		}
		hex := strings.TrimPrefix(string(kv.Key), side+"desc/")
		id, ok := parseLease(hex)
		if !ok {
			continue
		}
		octx, cancel := s.op(ctx)
		_, err := s.c.Revoke(octx, id)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return out, s.fail("revoke the lease of dead pid "+fmt.Sprint(d.PID), err)
		}
		r := roles[hex]
		what := "dead waiter"
		if r.holder {
			what = "expired lease"
		}
		out = append(out, store.Pruned{Key: r.key, What: what, Path: prefixOf(r.key) + hex})
	}
	queued, err := s.pruneQueued(ctx)
	return append(append(out, queued...), pruneTickDirs(s.recordExists(ctx))...), err
}

// pruneQueued deletes this host's queued leftover records (see leftover)
// that name nothing: their contender is gone (its pid dead, its key with
// its lease) and no process of the tree they name runs, as Options.Running
// counts them (without it, none is deleted). A waiter killed while it
// waited leaves such a record; it would otherwise show as the leftovers of
// a free key until a holder on this host took the key. Each is deleted
// only as it was read and while its contender key is absent.
func (s *Store) pruneQueued(ctx context.Context) ([]store.Pruned, error) {
	if s.running == nil {
		return nil, nil
	}
	return s.dropRecords(ctx, "dead waiter's record", func(kv *mvccpb.KeyValue) bool {
		r, ok := parseLeftover(kv)
		if !ok || !r.Queued || r.Host != s.host || alive(r.PID) {
			return false
		}
		n, err := s.running([]store.Leftover{bound(r, s.host, string(kv.Key)).tree()})
		return err == nil && n == 0 // else a tree runs: the next holder here stops it
	})
}

// ForgetHost deletes the leftover records of host, a host gone for good
// (prune --forget-host, E11): only a fencerun there could stop or count
// the trees they name, and until they are deleted every takeover of their
// keys names them. Records of host's live contenders (whose contender key
// is still there) stay: such a host is not gone.
func (s *Store) ForgetHost(ctx context.Context, host string) ([]store.Pruned, error) {
	return s.dropRecords(ctx, "record of forgotten host "+store.Printable(host), func(kv *mvccpb.KeyValue) bool {
		var r leftover
		return json.Unmarshal(kv.Value, &r) == nil && r.Host == host
	})
}

// dropRecords deletes the leftover records drop picks, each only as it was
// read and while its contender key is absent, and says which it deleted.
func (s *Store) dropRecords(ctx context.Context, what string, drop func(*mvccpb.KeyValue) bool) ([]store.Pruned, error) {
	octx, cancel := s.op(ctx)
	resp, err := s.c.Get(octx, side+"leftovers/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, s.fail("read leftovers", err)
	}
	out := []store.Pruned{}
	for _, kv := range resp.Kvs {
		// The record's key is the contender's under side+"leftovers/".
		contender, _ := strings.CutPrefix(string(kv.Key), side+"leftovers/")
		i := strings.LastIndexByte(contender, '/')
		if i <= 0 || !drop(kv) {
			continue
		}
		octx, cancel := s.op(ctx)
		done, err := s.c.Txn(octx).If(
			clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(contender), "=", 0),
		).Then(clientv3.OpDelete(string(kv.Key))).Commit()
		cancel()
		if err != nil {
			return out, s.fail("delete "+string(kv.Key), err)
		}
		if done.Succeeded {
			out = append(out, store.Pruned{Key: contender[:i], What: what, Path: string(kv.Key)})
		}
	}
	return out, nil
}

// alive says whether pid runs on this host (a zombie does not).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// recordExists is whether a leftover record is on the cluster, and the
// cluster's id; one that cannot be read is taken to be.
func (s *Store) recordExists(ctx context.Context) func(recordKey string) (bool, uint64) {
	return func(recordKey string) (bool, uint64) {
		octx, cancel := s.op(ctx)
		defer cancel()
		resp, err := s.c.Get(octx, recordKey, clientv3.WithCountOnly())
		if err != nil {
			return true, 0
		}
		return resp.Count > 0, resp.Header.ClusterId
	}
}
