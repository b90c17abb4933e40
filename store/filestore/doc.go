// Package filestore is fencerun's embedded lease store: state in files
// under a root directory on this host, no daemon. docs/DESIGN.md ("File
// backend layout") describes the files; the file that does a thing says
// how.
//
// It guarantees, on one host:
//
//   - S1: exclusion by kernel lock. Each holder keeps flock(LOCK_EX) on its
//     slot's live file for the whole lease; the kernel drops it when the
//     holder dies, however it dies, so a dead holder's lease is taken over
//     at once (its leftovers become the new Lease's Predecessor), and a live
//     one's never, even past its expiry or while it is stopped. A key
//     directory moved or deleted under a holder ends its lease, and no
//     newcomer starts in its slot beside it (moved_linux.go).
//   - M1-M3: many holders of one key (holders.go), each in a slot (the
//     key directory, or holders/<i>) of its own: it renews, is fenced,
//     revoked, cancelled and found dead alone, and a dead one frees only
//     its slot. --slots N takes the lowest free of N slots; shared holds
//     never meet an exclusive one, which inherits every dead holder's
//     leftovers; a claim of another kind is store.ErrSlots.
//   - S4: fences come from one counter per store, handed out only under a
//     durable reservation, so they never repeat or go back across crashes,
//     reboots, repairs and Prune (internal/statefs); a take's is above
//     every slot record's too.
//   - S5, B5: every change of a record is made under the key's guard lock,
//     as one write in place into the older of two checksummed slots:
//     readers see the old record or the new one, and a write cut at any
//     byte leaves the one before. Renewals are compare-and-swaps (Lease).
//   - S5: a holder hears of a revocation or a cancel request at once, by
//     internal/notify, from any network namespace (notify_linux.go).
//   - S10, P2, M2: waiters are served in arrival order across kinds, each
//     asleep in flock(2) on the one lock in its way (the head, on each busy
//     slot it may take), woken alone, reading only the entries just ahead
//     of it; a dead waiter loses its place at once (acquire.go).
//   - S6, S9: corrupt state fails closed (store.ErrCorrupt naming the file)
//     until Revoke repairs it; nothing is followed through a symlink; the
//     root is ours alone or a group store (access_linux.go); the token
//     never leaves the record file.
//   - N2, O1-O4: history and done IDs are files replaced whole under the
//     guard (history.go, once.go); Prune keeps a key that has them.
//
// It does not guarantee:
//
//   - anything across hosts: flock over a network file system is emulated
//     or absent, and pids in records mean something only on their host;
//   - exclusion against a process that ignores the protocol: anyone who can
//     write the root can break it, which is why the root must be ours;
//   - progress while a process is stopped holding a guard (guard.go): calls
//     that change the key wait, and Status and List answer without it,
//     maybe stale;
//   - a record readable after a power cut tore both its slots: it reads as
//     corrupt until release --force (internal/statefs, slotted.go);
//   - many holders against a fencerun from before them on the same root:
//     it sees slot 0 only, and may take it beside holders in holders/;
//   - cheap waiting for many slots: a head waiter of --slots N sleeps on
//     up to N threads, one per busy slot (holders.go).
package filestore
