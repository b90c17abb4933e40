package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/store"
)

// desc is a contender's side record: who it is, for status.
type desc struct {
	Name       string    `json:"name"`
	PID        int       `json:"pid"`
	Host       string    `json:"host"`
	Reason     string    `json:"reason,omitempty"`
	Acquired   time.Time `json:"acquired"`
	CommandPID int       `json:"command_pid,omitempty"`
	LastTick   time.Time `json:"last_tick,omitzero"`
	// Kind and Slots are what it holds or waits as (many.go); Slot is the
	// slot it took, once it holds one.
	Kind  store.Kind `json:"kind,omitempty"`
	Slots int        `json:"slots,omitempty"`
	Slot  *int       `json:"slot,omitempty"`
}

// leftover is a holder's command tree, kept until it is known gone.
type leftover struct {
	Marker  string          `json:"marker"`
	Cgroup  string          `json:"cgroup,omitempty"`
	Group   store.ProcessID `json:"group,omitzero"`
	Session store.ProcessID `json:"session,omitzero"`
	Host    string          `json:"host"`
	Name    string          `json:"name"`
	PID     int             `json:"pid"`
	Fence   uint64          `json:"fence"`
	// Queued: put when its contender queued, before it could hold, and not
	// yet rewritten by it as a holder (SetCommand's write). Its owner may
	// have died waiting (no tree) or just after it took the lease (a tree):
	// it is stopped as a leftover all the same, and named a Predecessor
	// only when no record of a confirmed holder is there.
	Queued bool `json:"queued,omitempty"`
}

func (r leftover) tree() store.Leftover {
	return store.Leftover{HolderPID: r.PID, Host: r.Host, Marker: r.Marker, Cgroup: r.Cgroup, Group: r.Group, Session: r.Session, Shared: true}
}

// parseLeftover reads a leftover record; one that names no tree is none.
func parseLeftover(kv *mvccpb.KeyValue) (leftover, bool) {
	var r leftover
	if json.Unmarshal(kv.Value, &r) != nil || r.Marker == "" && r.Cgroup == "" {
		return r, false
	}
	if r.Fence == 0 {
		// Put with the holder key: its create revision is the fence.
		r.Fence = uint64(kv.CreateRevision)
	}
	return r, true
}

// bound is r, the record at recordKey, as far as this host can tie it to
// a fencerun holder. Anyone who may write the cluster's side keys can put
// a leftover record, so a record of this host is not taken at its word: a
// tick marker counts only where its socket's directory binds it to this
// very record (proven, S9), else the record directs nothing (no marker,
// cgroup, group or session); its process group and session count only
// while their leader carries the record's marker in its environment (as
// every command fencerun starts does), and its cgroup only when it is one
// fencerun made (named fencerun-*). What is dropped is not stopped; the
// marker scan still finds the tree's processes that carry it.
func bound(r leftover, host, recordKey string) leftover {
	if r.Host != host {
		return r // not ours to act on; nobody here will
	}
	if !proven(r.Marker, recordKey) {
		r.Marker, r.Cgroup, r.Group, r.Session = "", "", store.ProcessID{}, store.ProcessID{}
		return r
	}
	if r.Group.ID != 0 && !carries(r.Group.ID, r.Marker) {
		r.Group = store.ProcessID{}
	}
	if r.Session.ID != 0 && !carries(r.Session.ID, r.Marker) {
		r.Session = store.ProcessID{}
	}
	if r.Cgroup != "" && !strings.HasPrefix(filepath.Base(r.Cgroup), "fencerun-") {
		r.Cgroup = ""
	}
	return r
}

// carries says whether process pid has marker in its environment. One
// whose environment cannot be read (gone, or another user's) does not.
func carries(pid int, marker string) bool {
	if marker == "" {
		return false
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if kv == marker {
			return true
		}
	}
	return false
}

// Acquire takes the lease on key (see store.Store): a new etcd lease, and
// one transaction that puts the contender key "key/<lease>", its
// description and its leftover record (a waiter's marked queued), so that
// a waiter's take has nothing to write before its command starts (P7).
// A waiter keeps its lease alive and waits, as concurrency.Mutex does, for
// the deletion of every contender created before it.
func (s *Store) Acquire(ctx context.Context, key string, claim store.Claim) (store.Lease, *store.Holder, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	if claim.TTL < MinTTL {
		return nil, nil, fmt.Errorf("etcdstore: ttl %v is under etcd's minimum of %v", claim.TTL, MinTTL)
	}
	if claim.Clock == nil {
		claim.Clock = boottime.Now
	}
	if err := store.ValidateClaimKind(claim); err != nil {
		return nil, nil, fmt.Errorf("etcdstore: %w", err)
	}
	a := &acquirer{s: s, key: key, claim: claim, me: kindOfClaim(claim)}
	l, h, err := a.acquire(ctx)
	if l != nil {
		s.historyStarted(ctx, l)
		return l, nil, nil
	}
	if a.id != 0 {
		// Whatever was put goes with the lease, and the leftover record
		// put with the contender key is deleted: nothing is left on etcd.
		rctx, cancel := s.op(context.WithoutCancel(ctx))
		deleted := make(chan error, 1)
		go func() {
			_, err := s.c.Delete(rctx, leftoverKey(key, a.id))
			deleted <- err
		}()
		if _, rerr := s.c.Revoke(rctx, a.id); rerr != nil {
			s.log.Warn("could not revoke the lease of a failed acquisition; it expires by itself", "lease", leaseHex(a.id), "error", rerr)
		}
		if derr := <-deleted; derr != nil {
			s.log.Warn("could not delete the leftover record of a failed acquisition", "key", leftoverKey(key, a.id), "error", derr)
		}
		cancel()
	}
	return nil, h, err
}

type acquirer struct {
	s     *Store
	key   string
	claim store.Claim
	me    kind // what the claim asks for (many.go)
	id    clientv3.LeaseID
	term  store.Term
	myKey string
	rev   int64 // create revision of myKey: the fence
	desc  desc
	// takeRev is the revision at which take last found an older
	// contender.
	takeRev int64
	// known are the descriptions of the contenders ahead as the waiter
	// queued (the set ahead only shrinks); ahead, the keys of those still
	// there at the last read (many.go).
	known map[string]store.Holder
	ahead map[string]bool
	// taken are the contenders that hold a slot key, as last read or
	// watched: those that have taken (many.go).
	taken map[string]bool
	// slot is the slot a slot or shared holder claimed (claimSlot).
	slot int
	// kept is the term of the waiter's last successful keep-alive (keep),
	// from its send time; the grant's until the first.
	keptMu sync.Mutex
	kept   store.Term
	// trouble is told by keep of every failed keep-alive: the wait reads
	// again (take) instead of trusting its watch, which on a cluster
	// gone as a whole neither ends nor errs (its client redials forever).
	trouble chan struct{}
}

func (a *acquirer) acquire(ctx context.Context) (*Lease, *store.Holder, error) {
	s := a.s
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("etcdstore: acquire %q: %w", a.key, context.Cause(ctx))
	}
	octx, cancel := s.op(ctx)
	start := a.claim.Clock()
	g, err := s.c.Grant(octx, ttlSeconds(a.claim.TTL))
	cancel()
	if err != nil {
		return nil, nil, s.fail("grant a lease", orCause(ctx, err))
	}
	a.id = g.ID
	a.s.bindTick(a.claim.Marker, leftoverKey(a.key, g.ID), g.ClusterId)
	a.term = store.Term{Start: start, TTL: time.Duration(g.TTL) * time.Second}
	a.myKey = prefixOf(a.key) + leaseHex(g.ID)
	a.desc = desc{Name: a.claim.Name, PID: os.Getpid(), Host: a.s.host, Reason: a.claim.Reason, Acquired: time.Now(), Kind: a.me.k}
	if a.me.k == store.KindSlot {
		a.desc.Slots = a.me.n
	}
	resp, err := a.enqueue(ctx)
	if err != nil {
		return nil, nil, err
	}
	a.rev = resp.Header.Revision
	if resp.Succeeded {
		// The leftover record was put with the key: its create revision
		// is the fence.
		if a.me.k == store.KindSlot {
			a.desc.Slot = new(int)
		}
		return a.held(resp.Header.Revision, resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs, nil)
	}
	return a.queued(ctx, resp)
}

// enqueue puts the contender key "key/<lease>", its description and its
// leftover record in one transaction. Alone under the prefix (and for a
// slot or shared claim, with slot 0 free: its slot key is put too), it
// holds at once and reads the leftover records. Else the same puts (the
// leftover record marked queued: the tree it names exists only once the
// waiter holds, and this way its take writes nothing) and a read of the
// contenders (ours the newest): for an exclusive claim the holder and the
// one just ahead of ours, the one to wait for; for the others all of
// them, and the slot keys (queued).
func (a *acquirer) enqueue(ctx context.Context) (*clientv3.TxnResponse, error) {
	pfx := prefixOf(a.key)
	put := clientv3.OpPut(a.myKey, "", clientv3.WithLease(a.id))
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()}
	then, held := []clientv3.Op{put}, a.desc
	if a.me.k != store.KindExclusive {
		if a.me.k == store.KindSlot {
			held.Slot = new(int)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(slotKey(a.key, 0)), "=", 0))
		then = append(then, slotPut(a.key, 0, a.id))
	}
	then = append(then, putDesc(a.id, held), a.leftoverPut(false), getLeftovers(a.key))
	els := []clientv3.Op{put, putDesc(a.id, a.desc), a.leftoverPut(true)}
	if a.me.k == store.KindExclusive {
		els = append(els, clientv3.OpGet(pfx, clientv3.WithFirstCreate()...), newest(pfx, 2))
	} else {
		els = append(els, getContenders(pfx), getSlots(a.key))
	}
	octx, cancel := a.s.op(ctx)
	defer cancel()
	resp, err := a.s.c.Txn(octx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return nil, a.s.fail("put "+a.myKey, orCause(ctx, err))
	}
	return resp, nil
}

// queued goes on with a contender that was not alone: it reads the
// descriptions of those ahead, refuses a claim of another kind than
// theirs (checkKinds), holds at once where they admit it (a shared claim
// behind shared holders, a slot one behind fewer than N), and else says
// who holds (no wait) or waits.
//
// An exclusive claim is admitted with none ahead, whatever their kinds:
// it reads only the holder's description and that of the one just ahead,
// whose kinds may refuse it and whose pids its waits use (deadahead); the
// contenders between were checked as they queued. A shared or slot claim
// reads them all: its admission counts their kinds.
func (a *acquirer) queued(ctx context.Context, resp *clientv3.TxnResponse) (*Lease, *store.Holder, error) {
	all := resp.Responses[3].GetResponseRange().Kvs
	ahead := aheadOf(all, a.rev)
	if a.me.k == store.KindExclusive {
		ahead = all // the holder
		if kvs := resp.Responses[4].GetResponseRange().Kvs; len(kvs) == 2 && kvs[0].CreateRevision == a.rev && kvs[1].CreateRevision != all[0].CreateRevision {
			ahead = append(ahead, kvs[1])
		}
	}
	hs, err := a.describeAhead(ctx, ahead)
	if err != nil {
		return nil, nil, err
	}
	if err := checkKinds(a.key, a.me, hs); err != nil {
		return nil, nil, err
	}
	a.known = make(map[string]store.Holder, len(hs))
	for i, kv := range ahead {
		a.known[string(kv.Key)] = hs[i]
	}
	a.setAhead(ahead)
	if a.me.k != store.KindExclusive {
		a.setTaken(resp.Responses[4].GetResponseRange().Kvs)
	}
	if admits(a.me, a.kindsAhead()) {
		// Taken once every one ahead has taken (ready); waited for even
		// without Wait, as is a slot still taken by a lost holder's slot
		// key, which goes with its lease in a moment.
		slots := resp.Responses[4].GetResponseRange().Kvs
		if !a.ready() {
			return a.wait(ctx, next{what: forAdmission, rev: a.rev})
		}
		l, n, err := a.claimSlot(ctx, slots, a.rev)
		var u unanswered
		if errors.As(err, &u) {
			return a.wait(ctx, next{}) // claims again while the lease lives
		}
		if l != nil || err != nil {
			return l, nil, err
		}
		return a.wait(ctx, n)
	}
	if !a.claim.Wait {
		held, _ := holders(hs)
		return nil, &held[0], nil
	}
	return a.wait(ctx, a.nextWait(ahead, a.rev))
}

// afterTake, set by tests, is told of every take of a waiter: whether it
// held.
var afterTake func(key string, held bool)

// newest reads the n contenders under pfx with the highest create
// revisions, newest first.
func newest(pfx string, n int64, opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpGet(pfx, append([]clientv3.OpOption{clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(n)}, opts...)...)
}

// getContenders reads every contender under pfx, keys only, oldest
// first.
func getContenders(pfx string) clientv3.Op {
	return clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// getLeftovers reads key's leftover records.
func getLeftovers(key string) clientv3.Op {
	return clientv3.OpGet(leftoversOf(key), clientv3.WithPrefix())
}

// putDesc puts the description d of the contender on lease id.
func putDesc(id clientv3.LeaseID, d desc) clientv3.Op {
	data, _ := json.Marshal(d) // plain data: cannot fail
	return clientv3.OpPut(descKey(id), string(data), clientv3.WithLease(id))
}

// orCause prefers the caller's reason (a signal, --wait) to the error it
// caused.
func orCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// leftoverPut is the contender's leftover record, put with its key (whose
// create revision is then its fence).
func (a *acquirer) leftoverPut(queued bool) clientv3.Op {
	return putLeftover(a.key, a.id, leftover{Marker: a.claim.Marker, Cgroup: a.claim.Cgroup, Host: a.s.host, Name: a.claim.Name, PID: os.Getpid(), Queued: queued})
}

// putLeftover writes a holder's leftover record, on no lease: it must
// outlive the holder.
func putLeftover(key string, id clientv3.LeaseID, r leftover) clientv3.Op {
	data, _ := json.Marshal(r)
	return clientv3.OpPut(leftoverKey(key, id), string(data))
}

// wait keeps the lease alive and waits for its turn, from n on: what a
// waiter waits for (see next), then a take, which holds at once or says
// what to wait for next, read in the same request: no read of its own
// between a deletion and the take (P7). An exclusive waiter waits, as
// concurrency.Mutex's waitDeletes does, until every contender created
// before it is gone, watching the newest of them until it is deleted. A
// lost watch is started again.
func (a *acquirer) wait(ctx context.Context, n next) (*Lease, *store.Holder, error) {
	s := a.s
	kctx, stopKeep := context.WithCancel(ctx)
	defer stopKeep() // not waited for: a keep-alive in flight ends with it
	a.kept = a.term
	a.trouble = make(chan struct{}, 1)
	go a.keep(kctx, a.term.TTL/3)
	s.log.Debug("waiting for the lease", "key", a.key, "lease", leaseHex(a.id))
	var streak unansweredFor
	for {
		if err := a.await(ctx, n); err != nil {
			return nil, nil, err
		}
		l, after, err := a.takeAny(ctx)
		if afterTake != nil {
			afterTake(a.key, l != nil)
		}
		var u unanswered
		if !errors.As(err, &u) {
			streak = unansweredFor{}
		} else if a.retry(&streak) {
			// A leader election, a member lost: the place in the queue
			// is still ours while the lease lives, so take again.
			s.log.Debug("the take got no answer; taking again while the lease lives", "key", a.key, "error", u.err)
			select {
			case <-time.After(retryBreath):
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("etcdstore: waiting for %q: %w", a.key, context.Cause(ctx))
			}
			n = next{}
			continue
		}
		if errors.As(err, &u) {
			err = u.err
		}
		if l != nil || err != nil {
			return l, nil, err
		}
		n = after
	}
}

// describeAhead reads the descriptions of the contenders ahead, just
// after the claim queued. A cluster that does not answer then (an
// election, a member lost) is asked again while the claim's lease lives,
// as a waiter's take is (wait): its place in the queue is still its own.
func (a *acquirer) describeAhead(ctx context.Context, ahead []*mvccpb.KeyValue) ([]store.Holder, error) {
	a.kept = a.term // no keep-alive runs yet
	var streak unansweredFor
	for {
		hs, err := a.s.describeAll(ctx, ahead)
		if err == nil || !a.retry(&streak) {
			return hs, err
		}
		a.s.log.Debug("reading who is ahead got no answer; reading again while the lease lives", "key", a.key, "error", err)
		select {
		case <-time.After(retryBreath):
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdstore: waiting for %q: %w", a.key, context.Cause(ctx))
		}
	}
}

// next is what a waiter waits for before it takes again, watched from
// after revision rev, at which it was read, so that no deletion is
// missed.
type next struct {
	what waitFor
	kv   *mvccpb.KeyValue // forKey: the contender ahead
	rev  int64
}

type waitFor int

const (
	takeNow      waitFor = iota
	forKey               // the deletion of the contender kv ahead
	forAdmission         // deletions ahead until admitted (many.go)
	forSlot              // a slot key's deletion (many.go)
)

func (a *acquirer) await(ctx context.Context, n next) error {
	switch n.what {
	case forKey:
		return a.waitAhead(ctx, n.kv, n.rev)
	case forAdmission:
		return a.waitAdmitted(ctx, n.rev)
	case forSlot:
		return a.waitSlot(ctx, n.rev)
	}
	return nil
}

// takeAny is take for an exclusive waiter, takeMany for the others.
func (a *acquirer) takeAny(ctx context.Context) (*Lease, next, error) {
	if a.me.k != store.KindExclusive {
		return a.takeMany(ctx)
	}
	l, older, err := a.take(ctx)
	return l, next{what: forKey, kv: older, rev: a.takeRev}, err
}

// keep keeps the waiting lease alive until ctx ends: a keep-alive every
// third of the TTL (every) on a stream of its own (keepAlives), each one's term
// kept from its send time, which the take starts the holder's term from
// (E2: the deadline counts from the send time of the last successful
// keep-alive), so that the take sends none of its own (P7). A failed one
// is retried after a quarter of that, and tells the wait (trouble), whose
// take then finds a lease that is gone, or, on a cluster that does not
// answer, takes again until the last keep-alive's term is over and then
// fails (E6: 125 naming the endpoint and the cause).
func (a *acquirer) keep(ctx context.Context, every time.Duration) {
	ka := keepAlives{s: a.s, id: a.id}
	defer ka.drop()
	next := every
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		// Bounded as a holder's renewal is (Lease.op): one that hangs
		// leaves time for others before the lease could expire.
		bound := min(a.s.timeout, every)
		octx, cancel := context.WithTimeout(ctx, bound)
		start := a.claim.Clock()
		// One that outlives its bound (opening a stream on a connection
		// that is being redialled need not heed octx) is trouble too.
		late := time.AfterFunc(bound, a.troubled)
		ttl, err := ka.send(clientv3.WithRequireLeader(octx))
		a.s.watchProber().Poke() // the wait's watch is checked with it (E7)
		late.Stop()
		cancel()
		switch {
		case err == nil:
			a.keptMu.Lock()
			a.kept = store.Term{Start: start, TTL: time.Duration(ttl) * time.Second}
			a.keptMu.Unlock()
			next = every
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			a.troubled()
			return
		default:
			a.troubled()
			next = every / 4 // soon, but not a busy loop on a dead cluster
		}
	}
}

// unanswered is a take's error that says nothing of the lease: the
// cluster did not answer (no leader, a member gone, a timeout).
type unanswered struct{ err error }

func (u unanswered) Error() string { return u.err.Error() }

// failTake is the error of a wait's call that failed (what it did): an
// unanswered one, which the wait asks again, when the cluster did not
// answer; else (a permission refused, a full database) the failure
// itself, which no retry mends (E6).
func (s *Store) failTake(what string, err error) error {
	failed := s.fail(what, err)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrGRPCNoLeader):
		return unanswered{failed}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		return unanswered{failed}
	}
	return failed
}

// retryBreath is the pause before a wait reads again after the cluster
// did not answer, so that one without a leader is not hammered.
const retryBreath = 100 * time.Millisecond

// leaseMayLive reports whether the waiter's lease is still within the
// term of its last keep-alive (counted from its send time, so it has not
// expired unless revoked).
func (a *acquirer) leaseMayLive() bool {
	a.keptMu.Lock()
	defer a.keptMu.Unlock()
	return a.claim.Clock()-a.kept.Start < a.kept.TTL
}

// unansweredFor is the streak of calls of a wait that the cluster has
// not answered, from since (the claim's clock); on is false when the last
// one was answered.
type unansweredFor struct {
	since time.Duration
	on    bool
}

// retry reports whether a wait whose call got no answer asks again: while
// its lease may live, and past that until --dial-timeout has passed since
// the first call in a row that got no answer (E6), as its place in the
// queue may be gone. Only a
// leader expires a lease, and a new one gives every lease a fresh term
// (etcd's lessor Promote): an election longer than the term is no sign
// that the lease is gone (E7), and if it is, the next answered take finds
// its contender key gone.
func (a *acquirer) retry(u *unansweredFor) bool {
	now := a.claim.Clock()
	if !u.on {
		u.since, u.on = now, true
	}
	return a.leaseMayLive() || now-u.since < a.s.timeout
}

// troubled tells the wait that a keep-alive failed, once until it reads.
func (a *acquirer) troubled() {
	select {
	case a.trouble <- struct{}{}:
	default:
	}
}

// keptTerm is the term of the waiter's last keep-alive when at most
// half of it is gone, so that the holder starts with room to renew.
func (a *acquirer) keptTerm() (store.Term, bool) {
	a.keptMu.Lock()
	defer a.keptMu.Unlock()
	return a.kept, a.kept.TTL > 0 && a.claim.Clock()-a.kept.Start < a.kept.TTL/2
}

// waitDelete returns once key is deleted after revision rev, or the watch
// ended, or a keep-alive failed (trouble; the caller reads again), or died
// was closed (the contender ahead died: deadahead_linux.go), or ctx ended.
func (a *acquirer) waitDelete(ctx context.Context, key string, rev int64, died <-chan struct{}) error {
	return a.watchUntil(ctx, key, false, rev, died, func(*clientv3.Event) bool { return true }, "")
}

// watchUntil is waitDelete of key, or with prefix of every key under it,
// that returns only once done says an event is enough: the deletions of
// key, and, with puts not "", the puts under that prefix too (a second watch on
// the same stream).
func (a *acquirer) watchUntil(ctx context.Context, key string, prefix bool, rev int64, died <-chan struct{}, done func(*clientv3.Event) bool, puts string) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Trouble, or the death of the contender ahead, ends the watch, also
	// one still being set up: Watch itself waits for a stream to the
	// cluster, as long as wctx lasts.
	var troubled atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-a.trouble:
			troubled.Store(true)
			cancel()
		case <-died:
			troubled.Store(true)
			cancel()
		case <-stop:
		}
	}()
	opts := []clientv3.OpOption{clientv3.WithRev(rev + 1), clientv3.WithFilterPut()}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	dels := a.s.c.Watch(wctx, key, opts...)
	var put clientv3.WatchChan // nil: none, never ready
	if puts != "" {
		put = a.s.c.Watch(wctx, puts, clientv3.WithRev(rev+1), clientv3.WithPrefix(), clientv3.WithFilterDelete())
	}
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-dels:
		case wr, ok = <-put:
		}
		if !ok || wr.Err() != nil {
			break
		}
		for _, ev := range wr.Events {
			if done(ev) {
				return nil
			}
		}
	}
	if ctx.Err() == nil && troubled.Load() {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("etcdstore: waiting for %q: %w", a.key, context.Cause(ctx))
	}
	// A watch ended by a lost leader: read again, after a breath, so a
	// cluster without a leader is not hammered.
	select {
	case <-time.After(100 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("etcdstore: waiting for %q: %w", a.key, context.Cause(ctx))
	}
}

// take holds the lease if our key is the oldest contender, checking in
// the same transaction that it is still there with its create revision
// (etcd#11456: a lease that expired while waiting), and reads the
// leftovers with the contenders (whose own records, put as they queued,
// name no tree yet): one read, no write (the waiter's leftover record was
// put as it queued). The holder's term is that of the waiter's last
// keep-alive (keep), or, when that is old, of one sent beside the read.
// When an older contender is still there, it returns the newest of them,
// to wait for.
func (a *acquirer) take(ctx context.Context) (*Lease, *mvccpb.KeyValue, error) {
	s := a.s
	octx, cancel := s.op(ctx)
	defer cancel()
	termOf := a.takeTerm(octx)
	pfx := prefixOf(a.key)
	first := clientv3.Compare(clientv3.CreateRevision(pfx), ">", a.rev-1).WithPrefix()
	resp, err := s.c.Txn(octx).If(a.mine(), first).
		Then(getLeftovers(a.key), clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())).
		Else(clientv3.OpGet(a.myKey), newest(pfx, 1, clientv3.WithMaxCreateRev(a.rev-1))).
		Commit()
	term, kerr := termOf()
	if ctx.Err() != nil && (err != nil || kerr != nil) {
		// The wait ended (-w, a signal) with the take in flight: its
		// cause, as where the wait ends between takes.
		return nil, nil, fmt.Errorf("etcdstore: waiting for %q: %w", a.key, context.Cause(ctx))
	}
	if err != nil {
		return nil, nil, s.failTake("take "+a.myKey, err)
	}
	if resp.Succeeded {
		if kerr != nil {
			return nil, nil, a.noTerm(kerr)
		}
		a.term = term
		// Its holding starts now, not when it queued: the description
		// written with the command's pid, and the history, say so.
		a.desc.Acquired = time.Now()
		l, _, err := a.held(resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
		return l, nil, err
	}
	if me := resp.Responses[0].GetResponseRange().Kvs; len(me) == 0 || me[0].CreateRevision != a.rev {
		return nil, nil, a.waitedOut()
	}
	older := resp.Responses[1].GetResponseRange().Kvs
	if len(older) == 0 {
		return nil, nil, fmt.Errorf("etcdstore: %s: not the oldest contender, and none older found", a.myKey)
	}
	a.takeRev = resp.Header.Revision
	return nil, older[0], nil
}

// takeTerm is the term a take holds with: that of the waiter's last
// keep-alive (keep) when at most half of it is gone, else that of one
// sent now, beside the take's read; the function waits for it.
func (a *acquirer) takeTerm(octx context.Context) func() (store.Term, error) {
	term, fresh := a.keptTerm()
	if fresh {
		return func() (store.Term, error) { return term, nil }
	}
	kept := make(chan error, 1)
	start := a.claim.Clock()
	go func() {
		ka, err := a.s.c.KeepAliveOnce(octx, a.id)
		if err == nil {
			term = store.Term{Start: start, TTL: time.Duration(ka.TTL) * time.Second}
		}
		kept <- err
	}()
	return func() (store.Term, error) {
		err := <-kept
		return term, err
	}
}

// noTerm is the error of a take that held, but with no term to start the
// keeper from: it gives the lease back (Acquire revokes it), or takes
// again while the lease may live.
func (a *acquirer) noTerm(kerr error) error {
	if errors.Is(kerr, rpctypes.ErrLeaseNotFound) {
		return a.s.fail("keep the lease alive", kerr)
	}
	return a.s.failTake("keep the lease alive", kerr)
}

// mine is the compare that the contender key is still there with its
// create revision.
func (a *acquirer) mine() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(a.myKey), "=", a.rev)
}

// waitedOut is the error of a contender whose key went while it waited.
func (a *acquirer) waitedOut() error {
	return fmt.Errorf("etcdstore: %s was deleted or its lease expired while it waited", a.myKey)
}

// held makes the Lease once ownership is confirmed at header revision
// confirmed; records are the key's leftover records read with it, and
// contenders the keys under its prefix then (whose records are waiters').
func (a *acquirer) held(confirmed int64, records, contenders []*mvccpb.KeyValue) (*Lease, *store.Holder, error) {
	l := &Lease{
		s: a.s, key: a.key, myKey: a.myKey, id: a.id, rev: a.rev, confirmed: confirmed,
		ttl: a.term.TTL, clock: a.claim.Clock, term: a.term, host: a.s.host,
		changes: make(chan struct{}, 1), desc: a.desc, cgroup: a.claim.Cgroup != "", ka: keepAlives{s: a.s, id: a.id},
		left: leftover{Marker: a.claim.Marker, Cgroup: a.claim.Cgroup, Host: a.s.host, Name: a.claim.Name, PID: os.Getpid(), Fence: uint64(a.rev)},
	}
	switch a.me.k {
	case store.KindShared:
		l.slot, l.slotKey = -1, slotKey(a.key, a.slot) // internal
	case store.KindSlot:
		l.slot, l.slotKey = a.slot, slotKey(a.key, a.slot)
	}
	live := waiting(a.key, contenders)
	live[leftoverKey(a.key, a.id)] = true
	var queuedElsewhere int
	l.pred, l.predKeys, queuedElsewhere = predecessor(records, a.key, live, a.s.host)
	if queuedElsewhere > 0 {
		a.s.log.Debug("queued records of dead contenders on other hosts are left to a fencerun there", "key", a.key, "records", queuedElsewhere)
	}
	l.watch()
	a.s.log.Debug("acquired", "key", a.key, "fence", a.rev, "lease", leaseHex(a.id))
	return l, nil, nil
}

// predecessor describes the trees dead (or revoked) holders of key left,
// from their leftover records other than those of live contenders (live:
// the holder's own and the waiters', see waiting): every record is a tree
// to stop, and the newest of a confirmed holder (not queued) is the
// predecessor; with none, the newest queued one, whose owner may have died
// just after it took the lease. Only records of this host can be
// confirmed stopped here (keys lists them).
//
// A queued record of another host is left out, and only counted
// (queuedElsewhere): nothing here can stop or count its tree, and it
// must neither be reported as a dead holder's leftovers running there
// nor keep this host's stopped records from being deleted (the caller
// skips LeftoversStopped when a tree is on another host). Its owner died
// either waiting (no tree: the common case, a waiter killed in its queue)
// or between its take and its first record as a holder (a tree may run
// there); the records cannot tell these apart, since the take writes
// nothing. Either way the record stays, for the next holder or prune on
// its own host, which can tell.
func predecessor(records []*mvccpb.KeyValue, key string, live map[string]bool, host string) (p *store.Holder, keys []string, queuedElsewhere int) {
	var (
		queued *store.Holder
		all    []store.Leftover
	)
	for _, kv := range records {
		r, ok := parseLeftover(kv)
		if live[string(kv.Key)] || !ok || !isLeftoverOf(key, kv.Key) {
			continue
		}
		if r.Queued && r.Host != host {
			queuedElsewhere++
			continue
		}
		r = bound(r, host, string(kv.Key))
		if r.Host == host {
			keys = append(keys, string(kv.Key))
		}
		all = append(all, r.tree())
		newest := &p
		if r.Queued {
			newest = &queued
		}
		if *newest == nil || r.Fence > (*newest).Fence {
			*newest = &store.Holder{Name: r.Name, PID: r.PID, Host: r.Host, Fence: r.Fence, Marker: r.Marker, Cgroup: r.Cgroup}
		}
	}
	if p == nil {
		p = queued
	}
	if p != nil {
		p.Leftovers = all
	}
	return p, keys, queuedElsewhere
}

// waiting names the leftover records of key's live contenders (keys
// under its prefix): the holder's own and those its waiters put as they
// queued, which name no tree that runs without its owner.
func waiting(key string, contenders []*mvccpb.KeyValue) map[string]bool {
	live := make(map[string]bool, len(contenders))
	for _, kv := range contenders {
		if name, ok := lockName(kv); ok && name == key {
			live[leftoverKey(key, clientv3.LeaseID(kv.Lease))] = true
		}
	}
	return live
}

// describeAll reads the descriptions of contender keys in one transaction
// (a few, past etcd's limit of operations in one).
func (s *Store) describeAll(ctx context.Context, kvs []*mvccpb.KeyValue) ([]store.Holder, error) {
	var ops []clientv3.Op
	for _, kv := range kvs {
		id := clientv3.LeaseID(kv.Lease)
		ops = append(ops, clientv3.OpGet(descKey(id)), clientv3.OpGet(cancelKey(id), clientv3.WithCountOnly()))
	}
	octx, cancel := s.op(ctx)
	defer cancel()
	var rs []*pb.RangeResponse
	for chunk := range slices.Chunk(ops, 64) {
		resp, err := s.c.Txn(octx).Then(chunk...).Commit()
		if err != nil {
			return nil, s.fail("read descriptions", err)
		}
		for _, r := range resp.Responses {
			rs = append(rs, r.GetResponseRange())
		}
	}
	out := make([]store.Holder, len(kvs))
	for i, kv := range kvs {
		h := store.Holder{Kind: store.KindExclusive, Name: notFencerun, Fence: uint64(kv.CreateRevision), Foreign: true}
		if d := rs[2*i]; len(d.Kvs) > 0 {
			var r desc
			if json.Unmarshal(d.Kvs[0].Value, &r) == nil {
				h.Foreign = false
				h.Name, h.PID, h.Host, h.Reason, h.Acquired = r.Name, r.PID, r.Host, r.Reason, r.Acquired
				h.CommandPID, h.LastTick = r.CommandPID, r.LastTick
				h.Kind, h.Slots, h.Slot = r.Kind, r.Slots, r.Slot
			}
			if k := kindOf(h); k.k != store.KindSlot {
				h.Kind, h.Slots, h.Slot = k.k, 0, nil
			}
		}
		h.Cancel = rs[2*i+1].Count > 0
		out[i] = h
	}
	return out, nil
}

// notFencerun names a contender without a description: etcdctl lock, or
// another concurrency.Mutex.
const notFencerun = "(etcd mutex, not fencerun)"

func parseLease(s string) (clientv3.LeaseID, bool) {
	n, err := strconv.ParseInt(s, 16, 64)
	return clientv3.LeaseID(n), err == nil && n != 0
}
