// Package filestore is fencerun's embedded lease store: state in files under
// a root directory on this host, no daemon. DESIGN.md ("File backend
// layout") describes the files; this comment says what they guarantee.
//
// What it guarantees, on one host:
//
//   - Mutual exclusion by kernel lock. The holder keeps flock(LOCK_EX) on the
//     key's live file for the whole lease. The kernel drops it when the
//     holder dies, however it dies, so a dead holder's lease is taken over
//     at once (its description, with its Marker, becomes the new Lease's
//     Predecessor), and a live one's is never taken, even past its expiry
//     or while it is stopped.
//   - Fences never repeat or go back, for any key, across crashes, reboots,
//     repairs and the removal of a key's directory by Prune: every fence
//     comes from one counter per store, exact within a boot, and is handed
//     out only once a durable reservation (fsync) covers it; after a reboot
//     the next fence is above the whole reservation, whatever unsynced
//     writes the crash lost (internal/statefs).
//   - Every change of a record happens under the key's guard lock (LOCK_EX)
//     and is one write in place into the older of two checksummed slots
//     (internal/statefs): readers, who hold the guard shared, see the old record or
//     the new one, and a write cut at any byte (a crash, a full disk, a
//     power cut) leaves the other slot, the record before it, good. Only a
//     fence reservation, and the first write of a record file, are
//     fsynced; a crash may lose a renewal, tick or release, which after the
//     reboot reads as a dead holder's record and is taken over at once. A
//     holder's renewals and ticks are compare-and-swaps on the record's
//     secret token and version, through the guard and record it keeps open
//     from its take to its release; each checks, under the guard, that the
//     names guard, lease and live and the key directory's path still name
//     the files it holds, and loses the lease if not (moved_linux.go).
//   - A free key's directory is removed by Prune only while nobody holds,
//     waits for or has leftovers under the key; an acquirer that opened the
//     directory before checks, once it holds the guard, that it is still
//     the key's, and starts over if not (prune.go).
//   - Waiters are served in arrival order. A waiter's queue entry is locked
//     before it becomes visible; an entry whose lock is free is a dead
//     waiter's and loses its place at once. A waiter sleeps in the kernel,
//     in flock(2) on the one lock in its way: the holder's live lock at the
//     head of the queue, else the entry lock of the waiter just ahead. A
//     release, a death or a departure drops that lock and wakes exactly the
//     next waiter, at once: no polling, no timer. A wake-up reads the
//     record, its own entry and the entries just ahead of it (those it saw
//     when it queued, nearest first, until a live one), never the rest of
//     the queue: a handoff costs the same behind 10 waiters or 1,000 (P2).
//   - A holder hears of a revocation or a cancel request at once: Revoke and
//     Cancel send a datagram to a unix socket in the key directory named in
//     its record (see notify_linux.go), and the holder's Check reads the
//     record. Only the store's users can reach it, from any network
//     namespace.
//   - Corrupt state fails closed: an unreadable record or queue entry is an
//     error wrapping store.ErrCorrupt naming the file, and nothing is
//     overwritten until Revoke clears it. Nothing in the root is followed
//     through a symlink: every file is opened relative to its directory with
//     O_NOFOLLOW, and a symlink is refused with store.ErrUnsafe. The root
//     is either ours and not writable by group or others (files 0600,
//     directories 0700), or a group store (group G, mode 2770, owned by root
//     or a member of G: files 0660, directories 2770, modes set explicitly),
//     and no ancestor of it is writable by another user unless sticky with
//     our entry ours or root's (internal/statefs). Descriptors are
//     close-on-exec.
//   - The token never leaves the record file: not in errors, logs or
//     Status.
//   - A key's done --once IDs (O1-O4) are one file replaced whole under
//     the guard: a holder marks its ID only after a renewal's compare-and-
//     swap on its record, before its free record is written, so a lease
//     lost first marks nothing and the next holder always sees the mark
//     (once.go). Prune keeps a key that has them.
//
// What it does not guarantee:
//
//   - Anything across hosts. Two hosts sharing the root over a network file
//     system do not exclude each other reliably (flock over NFS is emulated
//     or absent), and pids in records are only meaningful on their host.
//   - Exclusion against a process that does not follow the protocol: anyone
//     who can write the root can break it. That is why the root must be
//     ours alone.
//   - Progress while a process is stopped holding a guard lock (inside a
//     store call for a few microseconds): calls that change that key wait
//     for it, a holder's renewal included, log who holds it after a second
//     (guard.go), and give up when their context ends; Acquire without
//     Wait finds the key busy after that second. Status and List do not
//     wait past it: they read without the guard (live from /proc/locks,
//     which they never lock, so no acquirer can be misled) and log that the
//     answer may be momentarily stale; a holder whose lock that /proc does
//     not show (another pid namespace's) then reads as not holding.
//   - Prompt cleanup after a waiter gives up: its queue entry is removed at
//     once, but the goroutine blocked in flock(2) for it stays, with one
//     thread and one descriptor, until that lock is next released, then
//     drops it at once. A process that exits after giving up (fencerun)
//     does not notice.
//   - Prompt news of changes made by hand to the files: the holder sees
//     those at its next renewal.
//   - Durability of anything but the fence: after a crash a release or a
//     renewal may be lost, which only makes the holder look dead, which it
//     is.
//   - A record readable after a power cut that tore both of its slots: that
//     needs two writes of the record to be in flight to the disk at the cut,
//     each torn. It reads as corrupt and fails closed until release --force
//     (docs/DESIGN.md, "Writes in place").
package filestore
