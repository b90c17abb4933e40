// Package resident is the resident role of one store file (CONTRACT.md R1-R8):
// one live process serves a store, a second one is refused with the holder
// named or waits as a standby, and a newer build of the command can ask the
// holder to hand the role over. A held role is a *Role, which is a
// store.Lease, so the same keeper (package fence) and supervisor drive it.
//
// # Files
//
// For a store /d/app.db, beside it in /d:
//
//	app.db.resident.lock      the role: flock(LOCK_EX) held by the holder for
//	                          as long as it lives; its content is the payload
//	app.db.resident.fence     the durable fence reservation (internal/statefs)
//	app.db.resident.fence-next this boot's fence counter, and the fence lock
//	app.db.resident.handover  a newcomer's handover request (at most one)
//	app.db.resident.cancel    a cancel request: the holder's fence (cancel --resident)
//	app.db.resident.wait-*    a standby, locked by it while it waits (status shows it)
//
// The store path is its real path (R1: a symlink to the store is the same
// role), and a path naming a directory is refused. Every file is reached
// through the file layer the file backend uses too (internal/statefs),
// relative to the store directory opened with its Beside policy: a store
// directory that group or others can write (without the sticky bit) is
// refused (R4) by everything but Status and Revoke, which only look. All
// files are created 0600 and opened with O_NOFOLLOW; a symlink, a directory
// or another non-regular file in their place is an error naming it (B4),
// and so is, except for Status and Revoke, a file owned by another user.
// Files are replaced by temporary file and rename, durably
// (statefs.WriteAtomic); the payload is written in place. A payload
// that cannot be read fails closed, held or not (S6): Acquire returns
// store.ErrCorrupt naming the file, Status says corrupt, and Revoke
// (release --resident --force) clears it. Revoke also clears a fence reservation
// that cannot be read, or a FIFO or directory where the fence counter
// belongs (statefs.Counter.Repair: the next fence is above every one
// handed out before); until then every Acquire fails naming the file. A
// payload whose fence is beyond statefs.FenceMax-2*statefs.FenceBlock (no fence would be left above it) is corrupt, as a file
// backend record's is: the next fence would wrap around. The lock file is deleted only by
// Revoke: deleting or replacing it (by hand, a cleanup script) would let a
// standby lock a fresh inode, so a holder checks that the path still names
// the inode it locked (a check every second, Renew, Check) and
// gives up the role (store.ErrLost) when it does not, and a newcomer waits
// for the holder's claim until its tree is gone (moved_linux.go).
//
// Only a build of the same program is newer (R4): Build.Path is the
// command's path as found through PATH, symlinks not followed, or --build.
//
// # What it guarantees
//
//   - Exclusion is the kernel's: the role is held exactly while the holder's
//     open file description holds flock(LOCK_EX) on the lock file, so it ends
//     when the holder dies, however it dies, and `flock(1)` on that file blocks
//     while a resident runs. A live holder is never taken from (S1).
//   - The payload is never trusted alone (R2): a probe takes a non-blocking
//     lock first, and a payload on an unlocked file is stale and ignored. A
//     non-empty stale payload is a holder that died without releasing: its
//     marker, and the leftovers it had not yet confirmed stopped, become
//     the next holder's Predecessor. A holder that releases before it has
//     stopped its own predecessor's leftovers leaves its payload behind for
//     the same reason.
//   - A reader never sees a half-written payload. The payload lives in the
//     lock file, so it cannot be replaced by rename (that would swap the
//     locked inode); instead the holder rewrites it in place under an OFD
//     write lock (F_OFD_SETLK) and readers read under an OFD read lock. On
//     Linux these byte-range locks do not interact with flock. The file is
//     two checksummed slots (internal/statefs): a write is one pwrite into the
//     older slot, so a holder killed in the middle of one, or a power cut
//     tearing its page, leaves the payload before it readable; a release is
//     an empty slot.
//   - Fencing tokens (S4) come from the one fence allocator the file
//     backend uses too (internal/statefs): a reservation made durable
//     before the payload announces a token it covers, so a crash between
//     the two loses a token that was never handed out, and tokens survive
//     a reboot (the next is then above the whole reservation). The next
//     token is above every one handed out before and above a stale
//     payload's. An earlier fencerun's fence file ({"schema":1,"fence":N})
//     is read as a reservation of N: no token at or below it is handed out
//     again. (An earlier fencerun meeting the new file fails closed on it
//     as corrupt rather than reuse a token.)
//   - Handover (R5) is decided by the holder. A newcomer whose build is
//     strictly newer (Newer) writes a request naming the holder's fence; the
//     holder's Role hears of it on its socket (internal/notify, named in
//     its payload) and judges it at once, whatever its keeper is doing: it takes it (renames it away,
//     so each request is judged once) and either accepts (the payload says
//     handing_over, and Check returns store.RequestHandover from then on) or
//     records a refusal in its payload, where the newcomer reads it. Check
//     itself writes nothing. It refuses a request for another holder's
//     fence, one dated before its own acquisition, one not from a newer
//     build, and one whose requester is already dead. Two newcomers at once:
//     the last request written is judged; once the role moves, every
//     newcomer judges the new holder afresh, so the newest build ends up
//     holding it and an equal one is refused as not newer.
//   - A lock held while the payload names no live holder (a role being
//     taken or released, a status probe's instant) is given two seconds to
//     settle; then a corrupt payload fails closed (S6: store.ErrCorrupt naming
//     the file) and an empty one is refused as held by an unknown process.
//   - Waiting (a standby, or a newcomer waiting for a handover) sleeps in
//     poll(2) on a socket of its own (named in its standby file or request:
//     the holder tells it of its release and of its answer), a pidfd of
//     the holder and an eventfd for cancellation; it never spins, and a
//     standby behind a live holder on this host does nothing else (P8). A
//     holder it cannot follow by pidfd (another host's) is looked at every
//     second, and a lock held with no holder recorded (a flock(1) by hand)
//     ever later, up to every second.
//   - Ticks (R6): only the holding process writes its payload; Tick stamps
//     last_tick there. Status reports a holder that ticked and then stayed
//     silent for its stuck_after as store.Stuck (R7); one that never ticked
//     is never stuck.
//
// # What it does not guarantee
//
//   - It does not stop anything: a lost role only says so (Renew, Check), a
//     handover request only asks. Package fence and the supervisor act.
//   - The lock file must be on a local file system: on NFS, flock is emulated
//     with byte-range locks and would conflict with the payload's OFD locks.
//   - Liveness of a pid is judged on this host only; the role is one host's.
//   - Deleting the fence files by hand restarts tokens from the stale
//     payload (or 1), like deleting any state.
//   - When a holder accepts a request but its command takes longer than the
//     newcomer's HandoverWait to stop, the newcomer gives up
//     (ReasonHandoverTimedOut) and the role is then free for whoever comes
//     next: HandoverWait should exceed the holder's --grace.
//   - Status is a snapshot: the role may change as soon as it returns. Its
//     probe holds a shared lock for an instant; an Acquire that meets it
//     sees a held file with a stale payload and retries, unless the stale
//     payload's pid has since been reused by a live process, when it reports
//     that pid as the holder (contention, never a second holder).
package resident
