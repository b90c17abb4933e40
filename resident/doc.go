// Package resident is the resident role of one store file (R1-R8): one
// live process serves a store, a second one is refused with the holder
// named or waits as a standby, and a newer build of the command can ask
// the holder to hand the role over. A held role is a *Role, a store.Lease,
// so package fence (the lease keeper) and the supervisor drive it as a key.
// Its files sit beside the store's real path (R1, see paths), reached
// through internal/statefs: a store directory that group or others can
// write is refused (R4), except by Status and Revoke.
//
// It guarantees:
//
//   - S1: exclusion is the kernel's: the role is held exactly while the
//     holder's flock(LOCK_EX) on the lock file lasts, so it ends however the
//     holder dies, and flock(1) on that file blocks while a resident runs.
//     A live holder is never taken from; a lock file moved or deleted under
//     it ends its role, and no newcomer starts beside it (moved_linux.go).
//   - R2, R3: the payload lives in the lock file and is never trusted alone:
//     a payload on an unlocked file is a dead holder's, whose leftovers
//     become the next holder's Predecessor. It is written in place into two
//     checksummed slots under an OFD lock, so no reader sees half a write
//     (B5, payload.go).
//   - S4: fences come from the allocator the file backend uses, durable
//     before use and above any stale payload's, across crashes and reboots
//     (fence.go).
//   - S6, B4: a payload, fence reservation or file that cannot be read fails
//     closed naming the file until Revoke (release --resident --force)
//     clears it; a symlink in a file's place is store.ErrUnsafe.
//   - R4, R5: only a strictly newer build of the same program is newer
//     (build.go); the holder judges each request once, at once, whatever its
//     keeper is doing, and refuses one for another fence, older than its
//     hold, not newer, or from a dead requester (handover.go, judge).
//   - R6, R7, R8: only the holder writes its payload (Tick); a holder that
//     ticked and went silent for stuck_after is store.Stuck; standbys wait
//     in poll(2), never spinning, and show as waiters (standby.go, P8).
//
// It does not guarantee:
//
//   - that anything is stopped: a lost role only says so (Renew, Check);
//   - a role across hosts or on NFS, where flock is emulated with
//     byte-range locks that would conflict with the payload's OFD locks;
//   - a handover when the holder's command takes longer than the newcomer's
//     HandoverWait to stop: the newcomer gives up and the role is then
//     free for whoever comes next, so HandoverWait should exceed --grace.
package resident
