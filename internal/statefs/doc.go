// Package statefs is fencerun's state on this host's file systems: how a
// state directory and its files are opened, checked, read, written and
// locked (dir_linux.go, access_linux.go, write_linux.go), the two-slot
// record format written in place (slots.go, slotted.go) and the fence
// counter (fences.go). The file backend's root (store/filestore) and the
// resident role's files beside a store (resident) reach every file
// through it; nothing in it imports anything of fencerun but store's
// sentinel errors.
//
// What it guarantees:
//
//   - B5: a file is replaced whole or not at all (WriteAtomic: a
//     temporary file, renamed over it), or written in place into the
//     older of two checksummed slots (WriteSlotted), so a reader never
//     sees half a write and a write cut at any byte leaves the record
//     before it. Durable writes fsync the file and the directory.
//   - S4: every fence Counter.Take returns is above every fence it
//     returned before from the same files, across process deaths at any
//     point, kernel crashes, power cuts and reboots (a durable reservation
//     made before a fence under it is handed out; fences.go says how).
//   - S9: nothing is followed through a symlink (O_NOFOLLOW relative to an
//     open directory: store.ErrUnsafe naming it); who may have written a
//     directory or file is checked at every open by its Access (a private
//     store's are the caller's, 0600 in 0700; a group store's its
//     group's, 0660 in 2770, owned by root or a member); modes are set
//     explicitly, never left to the umask.
//   - B4, S6: a file that is not what belongs there (a directory, FIFO or
//     device in a file's place, no valid slot, over MaxFileSize) is
//     store.ErrCorrupt naming it; a reservation that cannot be read fails
//     Take closed.
//
// What it does not guarantee:
//
//   - Exclusion: callers lock (flock on their own lock files, LockFile
//     and ProbeFD) around what must not interleave.
//   - Durability of writes not asked to be durable, or on a file system
//     that drops written-back pages within one boot.
//   - Anything about a path once its directory is open: a caller that
//     must notice its state moved away checks the path afresh (filestore's
//     and resident's moved_linux.go); and fences survive neither a hand
//     edit nor the deletion of both counter files.
package statefs
