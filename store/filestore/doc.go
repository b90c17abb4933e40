// Package filestore is fencerun's embedded lease store: state in files
// under a root directory on this host, no daemon. docs/DESIGN.md ("File
// backend layout") describes the files; the file that does a thing says
// how. It guarantees, on one host:
//
//   - S1: exclusion by kernel lock: each holder keeps flock(LOCK_EX) on its
//     slot's live file for the whole lease, which the kernel drops however
//     it dies: a dead holder's lease is taken over at once (its leftovers
//     the new Lease's Predecessor), a live one's never, even past its
//     expiry or stopped. A key directory moved or deleted under a holder
//     ends its lease, and no newcomer starts in its slot (moved_linux.go).
//   - M1-M3: many holders (holders.go), each in a slot (the key directory,
//     or holders/<i>) of its own, renewed, fenced, revoked, cancelled and
//     found dead alone; a dead one frees only its slot. --slots N takes the
//     lowest free of N; shared holds never meet an exclusive one, which
//     inherits every dead holder's leftovers; another kind is ErrSlots.
//     A holder beside one that is stopping dead holders' leftovers stops
//     them too before its command starts (keySlots.stopping).
//   - S4: fences come from one counter per store under a durable
//     reservation, above every slot record's: never repeated or lower
//     across crashes, reboots, repairs and Prune (internal/statefs).
//   - S5, B5: a record changes under the key's guard lock, by one write in
//     place into the older of two checksummed slots; renewals are
//     compare-and-swaps (Lease); a holder hears of a revocation or a
//     cancel at once, from any network namespace (notify_linux.go).
//   - S10, P2, M2: waiters are served in arrival order across kinds, each
//     asleep in flock(2) on the lock in its way (the head: each busy slot
//     it may take), woken alone, reading only the entries just ahead; a
//     dead waiter loses its place at once (acquire.go).
//   - S6, S9: corrupt state fails closed (store.ErrCorrupt naming the file)
//     until Revoke repairs it; no symlink is followed; the root is ours or
//     a group store (access_linux.go); the token never leaves the record.
//   - N2, O1-O4: history and done IDs are files replaced whole under the
//     guard (history.go, once.go); Prune keeps a key that has them.
//
// It does not guarantee: anything across hosts (flock over a network file
// system is emulated or absent, and pids mean something only on their
// host); exclusion against a process that ignores the protocol (hence a
// root of ours); progress while a process is stopped holding a guard
// (guard.go: changes wait, Status and List answer without it); a record
// whose two slots a power cut tore (corrupt until release --force); many
// holders against a fencerun from before them on the same root (it sees
// slot 0 only); a killed slot holder noticed at once by a head waiting on
// several slots (up to 100 ms late, holders.go).
package filestore
