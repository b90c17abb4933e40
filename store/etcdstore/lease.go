package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencerun/fencerun/store"
)

// Lease is a held lease on etcd: an etcd lease and the contender key on it
// that has the lowest create revision under the key's prefix.
type Lease struct {
	endMu  sync.Mutex
	ending *store.Ending // how the holding ended (Ended), written with the release

	s         *Store
	key       string
	myKey     string
	id        clientv3.LeaseID
	rev       int64 // myKey's create revision: the fence and the version
	slot      int   // Slot: -1 shared, 0 exclusive, or the slot of slotKey
	slotKey   string
	confirmed int64 // the revision at which ownership was confirmed (ETCD_LOCK_REV)
	ttl       time.Duration
	clock     func() time.Duration
	term      store.Term
	host      string
	pred      *store.Holder
	changes   chan struct{}
	stopWatch context.CancelFunc

	mu       sync.Mutex
	desc     desc
	left     leftover // this holder's own leftover record
	predKeys []string // this host's leftover records of the predecessors
	// forgetting is closed once LeftoversStopped's deletion is done.
	forgetting chan struct{}
	released   bool
	// cgroup: the claim named a cgroup, which finds the tree exactly, so
	// SetCommand leaves its record to the next write (cmdPending), or to
	// cmdTimer's within recordDelay.
	cgroup     bool
	cmdPending bool
	cmdTimer   *time.Timer

	// ka is the keeper's keep-alive stream, opened at the first renewal.
	ka keepAlives
	// check is a renewal's compare alone, built at the first (compare).
	check *pb.TxnRequest
}

var _ store.Lease = (*Lease)(nil)

func (l *Lease) Key() string              { return l.key }
func (l *Lease) Fence() uint64            { return uint64(l.rev) }
func (l *Lease) Slot() int                { return l.slot }
func (l *Lease) Term() store.Term         { return l.term }
func (l *Lease) Changes() <-chan struct{} { return l.changes }

// Env is what etcdctl lock gives its command, and the cluster as
// etcdctl reads it (commandEnv).
func (l *Lease) Env() []string {
	return append([]string{"ETCD_LOCK_KEY=" + l.myKey, "ETCD_LOCK_REV=" + strconv.FormatInt(l.confirmed, 10)}, l.s.env...)
}

// Predecessor is the newest holder whose leftover record was found at
// acquisition, with every tree recorded (see store.Lease).
func (l *Lease) Predecessor() *store.Holder {
	if l.pred == nil {
		return nil
	}
	c := *l.pred
	return &c
}

// mine is the compare every holder write presents: the key still exists
// with the create revision it got, and a slot holder's slot key is still
// on its lease (one deleted by hand could be taken by another: this
// holder has then lost its slot, and its lease with it).
func (l *Lease) mine() []clientv3.Cmp {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(l.myKey), "=", l.rev)}
	if l.slotKey != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(l.slotKey), "=", l.id))
	}
	return cmps
}

func (l *Lease) lost(why string) error {
	return fmt.Errorf("%w: %s (fence %d) %s", store.ErrLost, l.myKey, l.rev, why)
}

// op bounds one holder call: by the dial timeout, and by a third of the
// TTL, so that a renewal that hangs leaves time for another.
func (l *Lease) op(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, min(l.s.timeout, l.ttl/3))
	return clientv3.WithRequireLeader(ctx), cancel
}

// Renew sends a keep-alive, whose Term starts just before it was sent, and
// a compare that the holder key still has its create revision (see the
// package comment). The compare is sent without waiting for the keep-
// alive's answer: the two go out in one write and come back in one read,
// which with the fixed windows (Open) took a quarter off a holder's CPU
// (P4 on etcd: docs/DESIGN.md). That changes nothing of what a renewal proves: it
// counts only when both succeed, the term still starts before either was
// sent, and a lease revoked between the two fails one of them (the
// revocation deletes the key, so the compare fails; the keep-alive finds
// no lease), in whichever order the server runs them.
func (l *Lease) Renew(ctx context.Context) (store.Term, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	start := l.clock()
	answer := l.ka.start(ctx)
	// The compare carries what SetCommand left for the next write.
	l.mu.Lock()
	pending := l.pending()
	l.mu.Unlock()
	succeeded, cerr := l.compare(ctx, pending)
	ttl, err := answer()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return store.Term{}, l.lost("was revoked or expired: its lease is gone")
	}
	if err != nil {
		return store.Term{}, l.s.fail("keep "+l.myKey+" alive", err)
	}
	if cerr != nil {
		return store.Term{}, l.s.fail("check "+l.myKey, cerr)
	}
	if !succeeded {
		return store.Term{}, l.lost("was deleted")
	}
	if len(pending) > 0 {
		l.mu.Lock()
		l.cmdPending = false
		if l.cmdTimer != nil {
			l.cmdTimer.Stop() // carried: nothing left for it to write
		}
		l.mu.Unlock()
	}
	return store.Term{Start: start, TTL: time.Duration(ttl) * time.Second}, nil
}

// compare runs the renewal's compare (mine), with the writes pending. A
// compare alone is the request check, built once: building it through
// the client's Txn (the compare made, then cloned by reflection) was 4%
// of a holder's CPU in its profile, a tenth of the renewal's (P4 on etcd).
func (l *Lease) compare(ctx context.Context, pending []clientv3.Op) (bool, error) {
	if len(pending) > 0 {
		resp, err := l.s.c.Txn(ctx).If(l.mine()...).Then(pending...).Commit()
		return err == nil && resp.Succeeded, err
	}
	if l.check == nil {
		l.check = &pb.TxnRequest{}
		for _, cmp := range l.mine() {
			l.check.Compare = append(l.check.Compare, cmp.GetCompare())
		}
	}
	// As the client's own calls: waiting for a connection within ctx,
	// with its retries of a request that was never sent, and its errors.
	resp, err := l.s.kv.Txn(ctx, l.check, waitForReady)
	if err != nil {
		return false, clientv3.ContextError(ctx, err)
	}
	return resp.Succeeded, nil
}

var waitForReady = grpc.WaitForReady(true)

// pending are the writes SetCommand left for the next one: the
// description with the command's pid and the leftover record with its
// process group and session. Called with l.mu held.
func (l *Lease) pending() []clientv3.Op {
	if !l.cmdPending {
		return nil
	}
	return []clientv3.Op{l.descPut(), putLeftover(l.key, l.id, l.left)}
}

func (l *Lease) descPut() clientv3.Op { return putDesc(l.id, l.desc) }

// Check reads whether the holder key is still ours and whether a cancel
// request waits for it. It writes nothing.
func (l *Lease) Check(ctx context.Context) (store.Request, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	resp, err := l.s.c.Txn(ctx).If(l.mine()...).Then(clientv3.OpGet(cancelKey(l.id), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return store.RequestNone, l.s.fail("check "+l.myKey, err)
	}
	if !resp.Succeeded {
		return store.RequestNone, l.lost("was revoked, expired or deleted")
	}
	if resp.Responses[0].GetResponseRange().Count > 0 {
		return store.RequestCancel, nil
	}
	return store.RequestNone, nil
}

// Tick records a liveness tick in the holder's description.
func (l *Lease) Tick(ctx context.Context, t time.Time) error {
	return l.describe(ctx, func(d *desc) { d.LastTick = t })
}

// SetCommand records the command's pid in the holder's description, and
// its process group and session in its leftover record, in one
// transaction: a holder that dies after this leaves what the next one
// needs to find its tree. With a cgroup, which the leftover record names
// from the acquisition on and which finds the tree exactly, the record is
// left to the next write (a renewal, a tick) or written within
// recordDelay, as the store contract allows: an uncontended run of a
// short command costs no write for it (P7). Without one it is written
// before SetCommand returns.
func (l *Lease) SetCommand(ctx context.Context, group, session store.ProcessID) error {
	l.mu.Lock()
	l.left.Group, l.left.Session = group, session
	l.desc.CommandPID = group.ID
	l.cmdPending = true
	if l.cgroup {
		if l.cmdTimer == nil && !l.released {
			l.cmdTimer = time.AfterFunc(l.recordDelay(), func() {
				// A lost lease says so to the keeper at its next check.
				_ = l.describe(context.Background(), nil)
			})
		}
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	return l.describe(ctx, func(*desc) {})
}

// commandDelay is how long SetCommand leaves its record for another write
// to carry: status shows a long command's pid within it, or with the
// first renewal (recordDelay). A variable for the tests only.
var commandDelay = 500 * time.Millisecond

// recordDelay is when SetCommand's record is written if no other write
// carried it: within commandDelay, or, when renewals come at most a second
// apart (a TTL up to 3 s), the first renewal carries it and the timer is
// only the fallback, commandDelay after that renewal is due. A write of
// its own was 0.8 ms of a 60 s hold's CPU at TTL 3 s (P4 on etcd).
func (l *Lease) recordDelay() time.Duration {
	if every := l.ttl / 3; every <= time.Second {
		return every + commandDelay
	}
	return commandDelay
}

// describe writes the holder's description after change, with whatever
// SetCommand left pending, if the holder key is still ours.
func (l *Lease) describe(ctx context.Context, change func(*desc)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return l.lost("was released")
	}
	if !l.cmdPending && change == nil {
		return nil
	}
	if change != nil {
		change(&l.desc)
	}
	ops := []clientv3.Op{l.descPut()}
	if l.cmdPending {
		ops = append(ops, putLeftover(l.key, l.id, l.left))
	}
	ctx, cancel := l.op(ctx)
	defer cancel()
	resp, err := l.s.c.Txn(ctx).If(l.mine()...).Then(ops...).Commit()
	if err != nil {
		return l.s.fail("describe "+l.myKey, err)
	}
	if !resp.Succeeded {
		return l.lost("was revoked, expired or deleted")
	}
	l.cmdPending = false
	return nil
}

// LeftoversStopped deletes this host's leftover records of the
// predecessors; another host's stay for a holder or prune there.
//
// The deletion is sent and not waited for: the trees are gone, so the
// command may start at once (P7: a handoff after a dead contender had a
// write before its command); Release waits for it. A record it did not
// delete (the holder died in between, the cluster failed the write) only
// makes the next holder here look again and find nothing.
func (l *Lease) LeftoversStopped(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.predKeys) == 0 {
		return nil
	}
	var ops []clientv3.Op
	for _, k := range l.predKeys {
		ops = append(ops, clientv3.OpDelete(k))
	}
	l.predKeys = nil
	if l.pred != nil {
		for _, tr := range l.pred.Leftovers {
			if tr.Host == l.s.host {
				unbind(tr.Marker) // its record goes now
			}
		}
	}
	forgotten := make(chan struct{})
	l.forgetting = forgotten
	go func() {
		defer close(forgotten)
		ctx, cancel := l.s.op(context.WithoutCancel(ctx))
		defer cancel()
		if _, err := l.s.c.Txn(ctx).Then(ops...).Commit(); err != nil {
			l.s.log.Warn("could not delete the records of stopped leftovers; the next holder here looks for them again",
				"key", l.key, "error", l.s.fail("forget leftovers of "+l.key, err))
		}
	}()
	return nil
}

// Release deletes the holder key, its description, cancel request and
// leftover record in one transaction (the next waiter is woken by that
// deletion), and then revokes the lease, which has no key left on it. The
// revoke goes after the transaction, not beside it: beside it, it delayed
// the deletion's event by 0.2 ms (P7). It is waited for: sent and not
// waited for, 8 of 20 leases outlived a run that exited at once, until
// their TTL. A lost lease only has its leftover record deleted: its
// command's tree is gone, or Release would not be called.
func (l *Lease) Release(ctx context.Context) error { return l.release(ctx, "") }

// release is Release, and with id not empty ReleaseDone (once.go).
func (l *Lease) release(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	l.released = true
	l.ka.drop()
	if l.forgetting != nil {
		<-l.forgetting // bounded by the dial timeout
	}
	if l.cmdTimer != nil {
		l.cmdTimer.Stop()
	}
	l.stopWatch()
	own := clientv3.OpDelete(leftoverKey(l.key, l.id))
	end := l.endPut() // the holding's end, in the history (history.go)
	dels := []clientv3.Op{clientv3.OpDelete(l.myKey), clientv3.OpDelete(descKey(l.id)), clientv3.OpDelete(cancelKey(l.id)), own, end}
	if l.slotKey != "" {
		dels = append(dels, clientv3.OpDelete(l.slotKey))
	}
	var err error
	if id != "" {
		err = l.releaseDone(ctx, id, dels, own)
	} else {
		octx, cancel := l.s.op(ctx)
		var resp *clientv3.TxnResponse
		resp, err = l.s.c.Txn(octx).If(l.mine()...).Then(dels...).Else(own).Commit()
		cancel()
		if err != nil {
			err = l.s.fail("release "+l.myKey, err)
		} else if !resp.Succeeded {
			// Lost before the release: its end, unless a revoker wrote one.
			if herr := l.s.endUnlessEnded(ctx, historyKey(l.key, l.rev), end); herr != nil {
				l.s.log.Warn("could not write the end of the holding to the key's history", "key", l.key, "error", herr)
			}
		}
	}
	// A call of its own: a transaction that ran out of time leaves the
	// revoke its own, which deletes the keys on the lease.
	rctx, rcancel := l.s.op(ctx)
	_, rerr := l.s.c.Revoke(rctx, l.id)
	rcancel()
	if rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
		// The keys are gone with the transaction; the lease, with no key
		// left on it, expires by itself.
		l.s.log.Debug("could not revoke a released lease; it expires by itself", "lease", leaseHex(l.id), "error", rerr)
	}
	if err != nil {
		return err
	}
	l.s.log.Debug("released", "key", l.key, "fence", l.rev)
	return nil
}

// watch starts watching the holder key, its cancel key and its slot key,
// from just after each was put, so no change made since is missed.
func (l *Lease) watch() {
	ctx, cancel := context.WithCancel(l.s.c.Ctx())
	l.stopWatch = cancel
	go l.watchKey(ctx, l.myKey, l.rev+1)
	go l.watchKey(ctx, cancelKey(l.id), l.rev+1)
	if l.slotKey != "" {
		// A slot key deleted by hand frees the slot for another at once:
		// heard at once too, not at the next renewal (E3). It was put
		// at the confirming revision.
		go l.watchKey(ctx, l.slotKey, l.confirmed+1)
	}
}

// watchKey tells Changes of every event on key and of every end of the
// watch (a lost leader, a closed stream), and watches again from the last
// revision seen, until ctx ends.
func (l *Lease) watchKey(ctx context.Context, key string, from int64) {
	for ctx.Err() == nil {
		for wr := range l.s.c.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithRev(from)) {
			if n := len(wr.Events); n > 0 {
				from = wr.Events[n-1].Kv.ModRevision + 1
			}
			if wr.CompactRevision > from {
				from = wr.CompactRevision
			}
			if wr.IsProgressNotify() {
				continue // the prober's answer: nothing changed
			}
			l.notify()
			if wr.Err() != nil {
				break
			}
		}
		l.notify()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (l *Lease) notify() {
	select {
	case l.changes <- struct{}{}:
	default:
	}
}
