// Package etcdstore is fencerun's etcd backend: the store contract kept on
// an etcd cluster, sharing lock names with etcdctl lock.
//
// Layout. A key K is the lock prefix "K/" of etcd's concurrency.Mutex, as
// `etcdctl lock K` uses it: every contender puts "K/<its lease in hex>"
// attached to its lease; the one with the lowest create revision holds, the
// others wait in create-revision order. Every key under "K/" counts, so a
// key "a/b" (whose contenders are "a/b/<lease>") blocks "a", as it does for
// etcdctl. fencerun's side keys live under "_fencerun/", which no valid key
// can be the prefix of (keys start with a letter or digit):
//
//	_fencerun/desc/<lease>          who the contender is (name, pid, host, ...), on its lease
//	_fencerun/cancel/<lease>        a cancel request for that holder, on its lease
//	_fencerun/leftovers/K/<lease>   a contender's command tree (marker, host), on no lease
//	_fencerun/once/K                the key's last 1,000 done --once IDs, on no lease
//
// What it guarantees:
//
//   - At most one holder per key among everything that follows the Mutex
//     protocol (fencerun, etcdctl lock, concurrency.Mutex), as long as the
//     cluster keeps quorum.
//   - The fence is the holder key's create revision: strictly greater than
//     every earlier fence of the key, across revocations, deaths and
//     server restarts (revisions never go back).
//   - A renewal is a keep-alive of the lease (on a stream kept for the
//     hold), whose Term starts just before it was sent, and a compare, sent
//     with it, that the holder key still has its create revision: a revoked
//     lease, an expired one or a deleted key fails it with store.ErrLost.
//     It counts only when both succeed. A keep-alive is not a compare-and-
//     swap; the compare beside it is what a renewal presents.
//   - A revocation (release --force, etcdctl lease revoke), a deleted holder
//     key, an expired lease and a cancel request reach the holder at once
//     through a watch on its key and its cancel key, created with
//     WithRequireLeader, so a member that loses its leader ends the watch
//     too and the holder checks.
//   - A holder marks its --once ID done in the transaction that deletes
//     its holder key, compared on that key's create revision: a holder
//     whose lease expired or was revoked marks nothing (O4, once.go).
//   - After waiting, a holder checks in one transaction that its own key
//     still exists with its create revision (etcd#11456: a lease that
//     expired while waiting) before it reports the lease held.
//   - A waiter keeps its place through a leader election or a lost
//     member: a read that gets no answer is made again while its lease is
//     within the term of its last keep-alive; past that it fails (E6).
//   - A member that goes silent (a partition, a black hole) leaves the
//     client's rotation within about a second of the next request on its
//     connection; renewals and waits send one each third of the TTL
//     (keep-alive, a waiter's progress request on its watch stream), idle
//     connections are pinged every 10 s: E7, see keepAliveTimeout and
//     prober.
//   - The command is told the cluster as etcdctl reads it
//     (ETCDCTL_ENDPOINTS, and the TLS files given), never credentials (E9).
//   - It stops no process and reads no process tree: Prune asks the
//     caller's Options.Running whether a dead waiter's tree runs, and
//     ForgetHost (prune --forget-host) drops a gone host's records (E11).
//   - Leftovers: a contender records its marker, cgroup and host in a side
//     key with no lease, with its contender key (a waiter's marked queued:
//     so its take writes nothing before its command starts), deleted when
//     it releases or gives up. One that dies leaves it, and the next holder
//     gets it as Predecessor (the newest of a holder that wrote its command
//     down; with none, the newest queued one); LeftoversStopped deletes only
//     the records of this host, so no host "stops" another host's
//     processes. The records of live contenders are not leftovers.
//   - S9: anyone who may write the cluster can put a leftover record, so
//     a record of this host directs signals only at a tree whose tick
//     socket its run bound to that very record (a file beside the socket
//     in the user's private $TMPDIR/fencerun-ticks-UID naming the record's
//     key: ticks.go); a forged one directs nothing. Runs share that one
//     directory and clear dead runs' sockets from it as they start.
//
// What it does not guarantee:
//
//   - That a live holder is never taken from: a holder silent for longer
//     than its TTL (SIGSTOP, a VM freeze, a partition) has lost its lease,
//     and another host may hold the key before it wakes. Its keeper stops
//     the command before the lease could expire, measured on its own clock
//     from the send time of the last keep-alive; across hosts, fencing is
//     the resource's job (check FENCERUN_FENCE).
//   - That a revoked holder has stopped before the next one starts: on etcd
//     a revocation frees the key at once. A next holder on the same host
//     stops the revoked holder's tree first (its leftover record is still
//     there); on another host it does not.
//   - That a Predecessor held the lease. A waiter killed while it waited
//     leaves a queued record, as a holder killed between its take and its
//     command's record (SetCommand's write) does, and the two are not told
//     apart: both are stopped as leftovers (the waiter's names no process
//     that runs), and the waiter is named a Predecessor when no confirmed
//     holder's record is there. prune deletes this host's queued records
//     whose contender is gone and whose tree does not run. Another host's
//     queued record is no Predecessor here and no tree of one (it is only
//     logged at debug level): nothing here could stop it, and a waiter
//     killed in its queue there must not make every run here warn of a
//     dead holder's leftovers elsewhere, nor keep this host's stopped
//     records from being deleted. So a tree that a holder there started
//     before its first record is not reported here; it stays recorded for
//     that host's next holder or prune.
//   - Cancel and status details for holders that are not fencerun (etcdctl
//     lock): they are listed, with their lease and fence, but cannot be
//     asked to stop.
package etcdstore
