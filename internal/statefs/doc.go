// Package statefs is the one file layer of fencerun's state on this
// host: how a state directory and the files in it are opened, checked,
// read, written and locked, for the file backend's state root
// (store/filestore) and the resident role's files beside a store
// (resident) alike. Both reach every file through it.
//
// What it guarantees:
//
//   - Nothing is followed through a symlink. A directory is opened with
//     O_DIRECTORY|O_NOFOLLOW and everything in it relative to its
//     descriptor with O_NOFOLLOW, so a symlink planted in place of a file
//     or directory is refused with store.ErrUnsafe naming it; a directory,
//     FIFO, socket or device where a regular file belongs is
//     store.ErrCorrupt naming it (a FIFO never blocks the open:
//     O_NONBLOCK). A missing file is an error that is fs.ErrNotExist.
//     Descriptors are close-on-exec.
//   - Who may have written a directory or file is checked at every open,
//     by its Access (access_linux.go, S9): a private store's directories
//     are the caller's and nobody else can write them; a group store's are
//     its group's, mode 2770, owned by root or a member; a directory
//     beside a store (the resident role's) may be anyone's but only its
//     owner may write it (or it is sticky), and every file in it must be
//     the caller's. Modes of what it creates are set explicitly, never left
//     to the umask.
//   - A file is replaced whole or not at all (WriteAtomic: a temporary file
//     beside it, renamed over it), or written in place into the older of
//     two checksummed slots (WriteSlotted, format internal/slots), so that
//     a reader never sees half a write and a write cut at any byte leaves
//     the file before it readable. Durable writes fsync the file and the
//     directory; durable-data writes (WriteOpts.DataOnly, a record's
//     first whole write) the file only, so that a crash may lose the
//     rename but never leave the name on an empty file.
//   - Files are read whole, bounded (MaxFileSize): anything larger is not
//     fencerun's and is store.ErrCorrupt.
//
// What it does not guarantee:
//
//   - Exclusion: the callers lock (flock on their own lock files, through
//     LockFile and ProbeFD here) around what must not interleave.
//   - Durability of writes not asked to be durable: those may be lost in
//     a crash (the callers say which writes may be).
//   - Anything about a directory's path once it is open: a caller that
//     must notice its state being moved away checks the path afresh
//     (filestore's and resident's moved_linux.go).
package statefs
