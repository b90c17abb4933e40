// Package etcdstore is fencerun's etcd backend: the store contract kept on
// an etcd cluster, sharing lock names with etcdctl lock (E1). A key K is
// the lock prefix "K/" of etcd's concurrency.Mutex: each contender puts
// "K/<its lease in hex>" on its lease, the lowest create revision holds,
// the others wait in that order. fencerun's side keys live under
// "_fencerun/" (no valid key can be its prefix): desc/<lease> (with the
// contender's kind and slots), cancel/<lease> and a slot holder's
// slot/K/<i> on the contender's lease; leftovers/K/<lease>, once/K
// (once.go) and history/K#<fence> (history.go) on no lease.
//
// It guarantees:
//
//   - S1, S4: one holder per key among all that follow the Mutex protocol
//     (fencerun, etcdctl lock) while the cluster keeps quorum, unless the
//     claims ask for more; the fence is the holder key's create revision,
//     which never goes back, and rises in queue order across all slots.
//   - M1, M2, M4: a contender holds by a rule on those ahead of it
//     (many.go): none for an exclusive one and for one not fencerun's, so
//     etcdctl lock is exclusive against every kind and waits for every
//     holder ahead; only shared ones for a shared one; fewer than N, all
//     slot-N, for a slot one, which then puts the lowest free slot key. A
//     claim of another kind than the fencerun contenders' ahead fails with
//     store.ErrSlots; a foreign holder is waited behind, never refused.
//   - M3: each holder has its own lease, key, watch and records; Revoke
//     and Cancel act on those store.Which picks. A slot taker inherits
//     every dead holder's leftovers, read as it claims its slot.
//   - S5, E2: a renewal is a keep-alive, whose Term starts just before it
//     was sent, plus a compare, sent with it, that the holder key still has
//     its create revision; it counts only when both succeed, so a revoked
//     or expired lease or a deleted key fails it with store.ErrLost. After
//     a wait the holder checks its key is still there (etcd#11456).
//   - E3: a revocation, a deleted key, an expired lease or a cancel request
//     reaches the holder at once, by a watch that a lost leader ends too.
//   - E7, E8: a silent member leaves the rotation within about a second of
//     the next request on its connection (keepAliveTimeout, prober), and a
//     waiter keeps its place through an election while its lease lives.
//   - E9: the command is told the cluster as etcdctl reads it, never
//     credentials. O4: a --once mark goes in the transaction that deletes
//     the holder key, compared on it.
//   - S2, S9, E11: a contender records its command tree in a leftover key
//     on no lease; a dead one's becomes the next holder's Predecessor, and
//     only this host's are deleted once stopped. A record directs signals
//     only at a tree whose tick socket is bound to it (ticks.go). It stops
//     no process itself (Options.Running); ForgetHost drops a gone host's.
//
// It does not guarantee:
//
//   - that a live holder is never taken from: one silent past its TTL (a
//     SIGSTOP, a VM freeze, a partition) has lost its lease, and another
//     host may hold the key before it wakes; across hosts, fencing is the
//     resource's job (E4: check FENCERUN_FENCE);
//   - that a revoked holder has stopped before the next one starts: a
//     revocation frees the key at once, and only a next holder on the same
//     host stops the revoked tree first;
//   - that a Predecessor held the lease: a waiter killed in its queue
//     leaves the record a holder killed before its first write leaves;
//   - that holders admitted together (shared, slots) start in fence
//     order; and a slot waiter is woken by every deletion under the
//     prefix (W waiters, W wake-ups a release), not by its predecessor's;
//   - cancel or details for holders that are not fencerun (etcdctl lock).
package etcdstore
