package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store"
)

// A key's done IDs (--once, O1-O4) are one side key on no lease,
// _fencerun/once/K, outside the lock prefix K/ (etcdctl never counts it):
// a JSON list of the last store.MaxDone marks, newest first, bounded so
// that the value stays far below etcd's request limit. A holder writes it
// in the transaction that deletes its holder key, compared on that key's
// create revision (the compare every holder write presents): a holder
// whose lease expired or was revoked has no key left, and marks nothing.
// The same transaction compares the list's mod revision as read just
// before, so that a once-reset or another key's writer in between is not
// overwritten; that compare failing alone is retried.

// doneKey is the side key of key's done IDs.
func doneKey(key string) string { return side + "once/" + key }

// doneList is the value of a done key.
type doneList struct {
	Done []store.Done `json:"done"`
}

// readDone reads key's done IDs and the mod revision of their side key
// (0: none).
func (s *Store) readDone(ctx context.Context, key string) ([]store.Done, int64, error) {
	octx, cancel := s.op(ctx)
	resp, err := s.c.Get(octx, doneKey(key))
	cancel()
	if err != nil {
		return nil, 0, s.fail("read "+doneKey(key), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return parseDone(resp.Kvs[0])
}

func parseDone(kv *mvccpb.KeyValue) ([]store.Done, int64, error) {
	var l doneList
	if err := json.Unmarshal(kv.Value, &l); err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, kv.Key, err)
	}
	return l.Done, kv.ModRevision, nil
}

// doneOps are the compare that done is still as read (at rev) and the
// write of next in its place.
func doneOps(key string, rev int64, next []store.Done) (clientv3.Cmp, clientv3.Op) {
	cmp := clientv3.Compare(clientv3.ModRevision(doneKey(key)), "=", rev)
	if len(next) == 0 {
		return cmp, clientv3.OpDelete(doneKey(key))
	}
	data, _ := json.Marshal(doneList{Done: next}) // plain data: cannot fail
	return cmp, clientv3.OpPut(doneKey(key), string(data))
}

// Done reads key's done IDs (see store.Store).
func (s *Store) Done(ctx context.Context, key string) ([]store.Done, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, err
	}
	done, _, err := s.readDone(ctx, key)
	return done, err
}

// Reopen forgets that id was done under key (see store.Store).
func (s *Store) Reopen(ctx context.Context, key, id string) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	for range doneTries {
		done, rev, err := s.readDone(ctx, key)
		if errors.Is(err, store.ErrCorrupt) {
			// Nothing in it can be kept: reopening one ID reopens them all.
			s.log.Warn("cleared done IDs that cannot be read; every ID of the key is open again", "key", key, "error", err)
			octx, cancel := s.op(ctx)
			_, err = s.c.Delete(octx, doneKey(key))
			cancel()
			if err != nil {
				return false, s.fail("delete "+doneKey(key), err)
			}
			return true, nil
		}
		kept, found := store.ReopenDone(done, id)
		if err != nil || !found {
			return false, err
		}
		cmp, put := doneOps(key, rev, kept)
		octx, cancel := s.op(ctx)
		resp, err := s.c.Txn(octx).If(cmp).Then(put).Commit()
		cancel()
		if err != nil {
			return false, s.fail("write "+doneKey(key), err)
		}
		if resp.Succeeded {
			return true, nil
		}
	}
	return false, fmt.Errorf("etcdstore: %s changed under %d tries to write it", doneKey(key), doneTries)
}

// doneTries bounds the writes of a done list that others keep changing.
const doneTries = 5

// ReleaseDone releases the lease and marks id done in the same
// transaction (see store.Lease and the comment above).
func (l *Lease) ReleaseDone(ctx context.Context, id string) error {
	if err := store.ValidateID(id); err != nil {
		return err
	}
	return l.release(ctx, id)
}

// releaseDone is the transaction of a release with id marked done: dels
// are the release's deletions, own its leftover record's (deleted in
// either case). It reports an error wrapping store.ErrLost when the
// holder key is not this lease's any more.
func (l *Lease) releaseDone(ctx context.Context, id string, dels []clientv3.Op, own clientv3.Op) error {
	for range doneTries {
		done, rev, err := l.s.readDone(ctx, l.key)
		if err != nil {
			return err
		}
		d := store.Done{ID: id, Fence: uint64(l.rev), Name: l.desc.Name, PID: l.desc.PID, Host: l.desc.Host, At: time.Now().UTC()}
		cmp, put := doneOps(l.key, rev, store.MarkDone(done, d))
		octx, cancel := l.s.op(ctx)
		reads := []clientv3.Op{own, clientv3.OpGet(l.myKey, clientv3.WithKeysOnly())}
		if l.slotKey != "" {
			reads = append(reads, clientv3.OpGet(l.slotKey, clientv3.WithKeysOnly()))
		}
		resp, err := l.s.c.Txn(octx).If(append(l.mine(), cmp)...).Then(append(dels, put)...).Else(reads...).Commit()
		cancel()
		if err != nil {
			return l.s.fail("release "+l.myKey, err)
		}
		if resp.Succeeded {
			return nil
		}
		if !l.stillMine(resp.Responses[1:]) {
			return l.lost("is gone: the lease expired or was revoked before the run's success could be marked")
		}
	}
	return fmt.Errorf("etcdstore: %s changed under %d tries to mark %q done", doneKey(l.key), doneTries, id)
}

// stillMine says whether reads of the holder key (and a slot holder's slot
// key) find them as mine compares them.
func (l *Lease) stillMine(reads []*pb.ResponseOp) bool {
	me := reads[0].GetResponseRange().Kvs
	if len(me) == 0 || me[0].CreateRevision != l.rev {
		return false
	}
	if l.slotKey == "" {
		return true
	}
	slot := reads[1].GetResponseRange().Kvs
	return len(slot) == 1 && slot[0].Lease == int64(l.id)
}

// AwaitDone waits for id to be marked done under key (see store.Store):
// a read, then a watch of the done key from just after it. A watch that
// ends while ctx has not (its member lost its leader, the stream broke)
// is made again from a fresh read.
func (s *Store) AwaitDone(ctx context.Context, key, id string) (*store.Done, error) {
	for {
		octx, cancel := s.op(ctx)
		resp, err := s.c.Get(octx, doneKey(key))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, s.fail("read "+doneKey(key), err)
		}
		if len(resp.Kvs) == 1 {
			if d := findDone(resp.Kvs[0], id); d != nil {
				return d, nil
			}
		}
		wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.c.Watch(wctx, doneKey(key), clientv3.WithRev(resp.Header.Revision+1)) {
			for _, ev := range wr.Events {
				if d := findDone(ev.Kv, id); d != nil {
					stop()
					return d, nil
				}
			}
		}
		stop()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// findDone is the mark of id in a done key's value (a deleted or
// unreadable one has none).
func findDone(kv *mvccpb.KeyValue, id string) *store.Done {
	done, _, err := parseDone(kv)
	if err != nil {
		return nil
	}
	return store.FindDone(done, id)
}
