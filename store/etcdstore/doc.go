// Package etcdstore is fencerun's etcd backend: the store contract kept on
// an etcd cluster, sharing lock names with etcdctl lock (E1). A key K is
// the lock prefix "K/" of etcd's concurrency.Mutex: each contender puts
// "K/<its lease in hex>" on its lease and waits for those ahead of it by
// create revision. Side keys live under "_fencerun/" (no valid key can be
// its prefix): desc/<lease>, cancel/<lease> and a slot or shared
// holder's slot/K/<i> on the contender's lease; leftovers/K/<lease>, once/K
// (once.go) and history/K#<fence> (history.go) on no lease. It guarantees:
//
//   - S1, S4: among all that follow the Mutex protocol (fencerun, etcdctl
//     lock) and while the cluster keeps quorum, one holder per key unless
//     the claims ask for more; the fence is the holder key's create
//     revision, rising across all slots: takes go in queue order.
//   - M1-M4 (many.go): a contender holds by a rule on those ahead: none for
//     an exclusive one and for one not fencerun's (so etcdctl lock is
//     exclusive against every kind); only shared ones for a shared one;
//     fewer than N slot-N ones for a slot one; it takes the lowest free
//     slot key once every one ahead has one (a shared one too). Another
//     kind than the fencerun contenders' ahead is store.ErrSlots. Each
//     holder has its own lease, key, watch and records; Revoke and Cancel
//     act on those store.Which picks.
//   - S5, E2: a renewal is a keep-alive, its Term from just before it was
//     sent, plus a compare sent with it that the holder key (and slot key)
//     is still its own; both must succeed, else store.ErrLost.
//   - E3: a revocation, a deleted key, an expired lease or a cancel request
//     reaches the holder at once, by a watch that a lost leader ends too.
//   - E7, E8: a silent member leaves the rotation within about a second of
//     the next request on it, and a waiter keeps its place through an
//     election while its lease lives. E9: the command is told the cluster
//     as etcdctl reads it, never credentials. O4: a --once mark goes in
//     the transaction that deletes the holder key.
//   - S2, S9, E11: a contender records its tree in a leftover key on no
//     lease; a dead one's becomes the next holder's Predecessor (a slot
//     taker's: every dead holder's), directing signals only at a tree whose
//     tick socket is bound to it (ticks.go); ForgetHost drops a gone host's.
//
// It does not guarantee: that a live holder is never taken from (one
// silent past its TTL has lost its lease: E4, fencing is the resource's
// job); that a revoked holder has stopped before the next starts (only a
// next holder on its host stops it first); that a Predecessor held the
// lease; a start beside a stopped one ahead (FIFO); cheap slot waiting
// (W waiters get W watch events a release); cancel, details of others.
package etcdstore
