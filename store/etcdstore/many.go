package etcdstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/store"
)

// Many holders of one key (M1, M2). Holders stay contender keys K/<lease>
// under the lock prefix, so etcdctl lock and concurrency.Mutex see each
// as a contender ahead of them. What a contender asks for is in its desc
// (kind, slots), put with its key and never changed, and admission is a
// rule on the contenders ahead of it in create-revision order:
//
//   - exclusive (and every contender without a desc: etcdctl lock): none
//     ahead;
//   - shared: fewer than store.MaxSlots ahead, every one shared;
//   - slot N: fewer than N ahead, every one slot-N.
//
// New contenders only ever join behind, so the set ahead of a waiter only
// shrinks and a waiter once admitted stays admitted. The holders are the
// admitted head of the queue, and the kinds a waiter read as it queued
// are all it needs. An exclusive take reads the keys ahead and writes
// nothing (P7, unchanged).
//
// A slot or shared contender takes by putting a slot key on its lease,
// _fencerun/slot/K/<i> for the lowest free i (a shared one's is internal:
// Slot() is -1, status shows none), if absent, in a transaction that
// compares its own key and reads the leftover records at the same
// revision: a dead holder's slot key goes with its lease, so whoever
// takes its slot finds its record dead and stops its tree first (M3).
// The slot keys are also the marks of having taken: an admitted
// contender takes only once every one ahead has its slot key, so takes
// go in create-revision order and the fence (E1) rises in take order (S4,
// M1). It watches the slot keys' puts beside the prefix's deletions. One
// ahead that dies before it takes loses its key with its lease (and one
// of this host is revoked at once, deadahead_linux.go); one stopped
// (SIGSTOP) keeps those behind it waiting until it resumes or its lease
// expires, FIFO as for exclusive holds. An admitted claim that finds
// every slot taken (a lost holder's slot key stays until its lease is
// revoked), or one ahead not yet taken, waits, even without Wait.

// kind is what a contender holds as (M1, M2): a store.Kind, and its slots
// (1 unless store.KindSlot).
type kind struct {
	k store.Kind
	n int
}

var exclusive = kind{store.KindExclusive, 1}

// kindOfClaim is the kind a claim asks for.
func kindOfClaim(c store.Claim) kind {
	k, n := store.KindOf(c)
	return kind{k, n}
}

// kindOf is the kind a contender's Holder (describeAll) names; one that is
// not fencerun's, or of a fencerun before slots, is exclusive.
func kindOf(h store.Holder) kind {
	switch k := h.HoldKind(); {
	case k == store.KindShared:
		return kind{store.KindShared, 1}
	case k == store.KindSlot && h.Slots > 1:
		return kind{store.KindSlot, h.Slots}
	}
	return exclusive
}

// admits says whether a contender of kind me holds with the contenders
// of kinds ahead before it (see the comment above).
func admits(me kind, ahead []kind) bool {
	switch me.k {
	case store.KindShared:
		if len(ahead) >= store.MaxSlots {
			return false
		}
	case store.KindSlot:
		if len(ahead) >= me.n {
			return false
		}
	default:
		return len(ahead) == 0
	}
	for _, k := range ahead {
		if k != me {
			return false
		}
	}
	return true
}

// holding is how many contenders at the head of a queue of kinds (oldest
// first) hold: the admitted ones, always a head of the queue, since one
// that is not admitted keeps every one behind it out too.
func holding(queue []kind) int {
	for i := range queue {
		if !admits(queue[i], queue[:i]) {
			return i
		}
	}
	return len(queue)
}

// holders splits contenders' descriptions (oldest first) into holders and
// waiters.
func holders(hs []store.Holder) (held, waiting []store.Holder) {
	kinds := make([]kind, len(hs))
	for i, h := range hs {
		kinds[i] = kindOf(h)
	}
	n := holding(kinds)
	return hs[:n], hs[n:]
}

// checkKinds refuses a claim of kind me beside a fencerun holder or
// waiter of another kind (M1, store.SameKind). A contender that is not
// fencerun's (etcdctl lock) is waited behind, never refused.
func checkKinds(key string, me kind, hs []store.Holder) error {
	held, _ := holders(hs)
	for i, h := range hs {
		if h.Foreign {
			continue
		}
		role := "waiter"
		if i < len(held) {
			role = "holder"
		}
		if err := store.SameKind(me.k, me.n, h, role); err != nil {
			return fmt.Errorf("etcdstore: %q: %w", key, err)
		}
	}
	return nil
}

// Slot keys: _fencerun/slot/K/<i>, on the slot holder's lease.
func slotsOf(key string) string        { return side + "slot/" + key + "/" }
func slotKey(key string, i int) string { return slotsOf(key) + strconv.Itoa(i) }
func getSlots(key string) clientv3.Op {
	return clientv3.OpGet(slotsOf(key), clientv3.WithPrefix(), clientv3.WithKeysOnly())
}
func slotPut(key string, i int, id clientv3.LeaseID) clientv3.Op {
	return clientv3.OpPut(slotKey(key, i), leaseHex(id), clientv3.WithLease(id))
}

// slotIndex is the slot a key read under slotsOf(key) is of key's: keys
// may hold "/", so that prefix also covers the slots of "K/x".
func slotIndex(key string, k []byte) (int, bool) {
	rest, ok := strings.CutPrefix(string(k), slotsOf(key))
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0
}

// lowestFree is the lowest slot below n that no key of kvs (read under
// slotsOf(key)) takes.
func lowestFree(key string, kvs []*mvccpb.KeyValue, n int) (int, bool) {
	taken := make([]bool, n)
	for _, kv := range kvs {
		if i, ok := slotIndex(key, kv.Key); ok && i < n {
			taken[i] = true
		}
	}
	i := slices.Index(taken, false)
	return i, i >= 0
}

// aheadOf is the keys of kvs (under the prefix, any order) created before
// rev.
func aheadOf(kvs []*mvccpb.KeyValue, rev int64) []*mvccpb.KeyValue {
	var out []*mvccpb.KeyValue
	for _, kv := range kvs {
		if kv.CreateRevision < rev {
			out = append(out, kv)
		}
	}
	return out
}

// slots is how many slot keys a contender may claim one of: N for a slot
// one, store.MaxSlots for a shared one.
func (a *acquirer) slots() int {
	if a.me.k == store.KindSlot {
		return a.me.n
	}
	return store.MaxSlots
}

// kindsAhead are the kinds of the contenders ahead, from what the waiter
// read as it queued (known): the set ahead only shrinks, so each was read
// then. One it does not know is taken for exclusive.
func (a *acquirer) kindsAhead() []kind {
	out := make([]kind, 0, len(a.ahead))
	for k := range a.ahead {
		if h, ok := a.known[k]; ok {
			out = append(out, kindOf(h))
		} else {
			out = append(out, exclusive)
		}
	}
	return out
}

// setAhead records the contenders ahead as read (any order).
func (a *acquirer) setAhead(kvs []*mvccpb.KeyValue) {
	a.ahead = make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		a.ahead[string(kv.Key)] = true
	}
}

// setTaken records which contenders have taken, from the slot keys read
// (any order): the contender key of each slot key's lease.
func (a *acquirer) setTaken(slots []*mvccpb.KeyValue) {
	a.taken = make(map[string]bool, len(slots))
	for _, kv := range slots {
		a.tookSlot(kv)
	}
}

// tookSlot records the contender whose slot key kv is as taken.
func (a *acquirer) tookSlot(kv *mvccpb.KeyValue) {
	if a.taken == nil {
		a.taken = make(map[string]bool)
	}
	if _, ok := slotIndex(a.key, kv.Key); ok && kv.Lease != 0 {
		a.taken[prefixOf(a.key)+leaseHex(clientv3.LeaseID(kv.Lease))] = true
	}
}

// ready says whether an admitted waiter may take: every contender ahead
// has taken (holds its slot key), so that takes go in fence order (S4,
// M1).
func (a *acquirer) ready() bool {
	for k := range a.ahead {
		if !a.taken[k] {
			return false
		}
	}
	return true
}

// nextWait is what a waiter that is not admitted with the contenders
// ahead (read at rev, oldest first) waits for: an exclusive one the
// newest ahead (as concurrency.Mutex does), a shared one the newest that
// is not shared, a slot one (or a shared one behind MaxSlots others) any
// deletion ahead that admits it (waitAdmitted).
func (a *acquirer) nextWait(ahead []*mvccpb.KeyValue, rev int64) next {
	a.setAhead(ahead)
	switch a.me.k {
	case store.KindExclusive:
		return next{what: forKey, kv: ahead[len(ahead)-1], rev: rev}
	case store.KindShared:
		for i := len(ahead) - 1; i >= 0; i-- {
			if h, ok := a.known[string(ahead[i].Key)]; !ok || kindOf(h) != a.me {
				return next{what: forKey, kv: ahead[i], rev: rev}
			}
		}
	}
	return next{what: forAdmission, rev: rev}
}

// waitAdmitted waits, from revision rev on, until enough contenders
// ahead are deleted for the waiter to be admitted, and every one left
// ahead has taken (ready): a watch of the whole prefix (deletions) and
// of the slot keys (puts), each event of one ahead recounted. It is
// woken by every deletion under the prefix, also of those behind it: W
// slot waiters cost W wake-ups a release, where an exclusive waiter costs
// one (its predecessor's). A dead contender of this host ahead has its
// lease revoked first, and one alive is watched by a pidfd, as an
// exclusive waiter's predecessor is (deadahead_linux.go): a pidfd and a
// goroutine for each, while it waits. Contenders admitted together take
// one after another, each a read and a write after the put of the one
// ahead (and a watch from a past revision, which etcd catches up every
// 100 ms): 200 shared waiters admitted together all hold about 1.4 s
// after the release, against 0.25 s when they took in any order.
func (a *acquirer) waitAdmitted(ctx context.Context, rev int64) error {
	a.revokeDeadAhead(ctx)
	if admits(a.me, a.kindsAhead()) && a.ready() {
		return nil
	}
	died := make(chan struct{})
	var once sync.Once
	for k := range a.ahead {
		if h, ok := a.known[k]; ok && !h.Foreign && h.Host == a.s.host && h.PID > 0 && h.PID != os.Getpid() {
			stop := onDeath(h.PID, func() { once.Do(func() { close(died) }) })
			defer stop()
		}
	}
	return a.watchUntil(ctx, prefixOf(a.key), true, rev, died, func(ev *clientv3.Event) bool {
		if ev.Type == mvccpb.PUT {
			a.tookSlot(ev.Kv)
		} else if a.ahead[string(ev.Kv.Key)] {
			delete(a.ahead, string(ev.Kv.Key))
		} else {
			return false
		}
		return admits(a.me, a.kindsAhead()) && a.ready()
	}, slotsOf(a.key))
}

// waitSlot waits, from revision rev on, for a slot key of the key to be
// deleted: an admitted slot holder that found every slot taken (a lost
// holder's slot key stays with its lease until that is revoked).
func (a *acquirer) waitSlot(ctx context.Context, rev int64) error {
	return a.watchUntil(ctx, slotsOf(a.key), true, rev, nil, func(ev *clientv3.Event) bool {
		_, ok := slotIndex(a.key, ev.Kv.Key)
		return ok
	}, "")
}

// revokeDeadAhead revokes the leases of the contenders ahead that are
// fencerun's of this host and whose process is gone (S10; see
// deadahead_linux.go), so that they do not keep their places until their
// leases expire.
func (a *acquirer) revokeDeadAhead(ctx context.Context) {
	for k := range a.ahead {
		h, ok := a.known[k]
		if !ok || h.Foreign || h.Host != a.s.host || h.PID <= 0 || alive(h.PID) {
			continue
		}
		if id, ok := parseLease(k[strings.LastIndexByte(k, '/')+1:]); ok && a.revokeLease(ctx, id, h.PID) {
			delete(a.ahead, k)
		}
	}
}

// takeMany is take for a shared or slot waiter: one read, with the compare
// that its key is still there, of every contender and the slot keys.
// Admitted (all ahead admit it) and ready (all ahead have taken), it
// claims a slot (claimSlot); else it says what to wait for.
func (a *acquirer) takeMany(ctx context.Context) (*Lease, next, error) {
	octx, cancel := a.s.op(ctx)
	defer cancel()
	termOf := a.takeTerm(octx)
	resp, err := a.s.c.Txn(octx).If(a.mine()).Then(getContenders(prefixOf(a.key)), getSlots(a.key)).Commit()
	term, kerr := termOf()
	if ctx.Err() != nil && (err != nil || kerr != nil) {
		return nil, next{}, fmt.Errorf("etcdstore: waiting for %q: %w", a.key, context.Cause(ctx))
	}
	if err != nil {
		return nil, next{}, a.s.failTake("take "+a.myKey, err)
	}
	if !resp.Succeeded {
		return nil, next{}, a.waitedOut()
	}
	ahead := aheadOf(resp.Responses[0].GetResponseRange().Kvs, a.rev)
	slots := resp.Responses[1].GetResponseRange().Kvs
	a.setAhead(ahead)
	a.setTaken(slots)
	if !admits(a.me, a.kindsAhead()) {
		return nil, a.nextWait(ahead, resp.Header.Revision), nil
	}
	if !a.ready() {
		return nil, next{what: forAdmission, rev: resp.Header.Revision}, nil
	}
	if kerr != nil {
		return nil, next{}, a.noTerm(kerr)
	}
	a.term = term
	// Its holding starts now, not when it queued (see take).
	a.desc.Acquired = time.Now()
	return a.claimSlot(ctx, slots, resp.Header.Revision)
}

// claimSlot takes the lowest free slot for a ready slot or shared
// contender, slots being the slot keys read at revision rev: it puts the
// slot key on its lease if absent, and its description (a slot one's
// with the slot), compared on
// its own key, and reads the leftover records and contenders in the same
// transaction, so that the dead holder whose slot it takes is dead in
// that read (its slot key went with its lease and its holder key), and
// its tree the Predecessor's. A slot taken meanwhile is read again; a
// slot key already on its own lease (a claim whose answer was lost) is
// its own. With every slot taken, it says to wait for one (forSlot).
func (a *acquirer) claimSlot(ctx context.Context, slots []*mvccpb.KeyValue, rev int64) (*Lease, next, error) {
	for {
		i, ok := lowestFree(a.key, slots, a.slots())
		free := clientv3.Compare(clientv3.CreateRevision(slotKey(a.key, i)), "=", 0)
		for _, kv := range slots {
			if j, isSlot := slotIndex(a.key, kv.Key); isSlot && kv.Lease == int64(a.id) {
				i, ok = j, true
				free = clientv3.Compare(clientv3.LeaseValue(slotKey(a.key, i)), "=", a.id)
			}
		}
		if !ok {
			return nil, next{what: forSlot, rev: rev}, nil
		}
		d := a.desc
		if a.me.k == store.KindSlot {
			d.Slot = &i // a shared holder's slot is internal
		}
		octx, cancel := a.s.op(ctx)
		resp, err := a.s.c.Txn(octx).If(a.mine(), free).
			Then(slotPut(a.key, i, a.id), putDesc(a.id, d), getLeftovers(a.key), getContenders(prefixOf(a.key))).
			Else(clientv3.OpGet(a.myKey, clientv3.WithKeysOnly()), getSlots(a.key)).Commit()
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, next{}, fmt.Errorf("etcdstore: waiting for %q: %w", a.key, context.Cause(ctx))
		case err != nil:
			return nil, next{}, a.s.failTake("claim "+slotKey(a.key, i), err)
		case resp.Succeeded:
			a.slot, a.desc = i, d
			l, _, err := a.held(resp.Header.Revision, resp.Responses[2].GetResponseRange().Kvs, resp.Responses[3].GetResponseRange().Kvs)
			return l, next{}, err
		case len(resp.Responses[0].GetResponseRange().Kvs) == 0:
			return nil, next{}, a.waitedOut()
		}
		slots, rev = resp.Responses[1].GetResponseRange().Kvs, resp.Header.Revision
	}
}
