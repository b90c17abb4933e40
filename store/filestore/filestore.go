package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/store"
)

// ErrClosed: the Store was closed. Leases taken from it keep working.
var ErrClosed = errors.New("filestore: store is closed")

// ErrNoState: Open was told the state root must exist, and it does not
// (or has no keys directory yet). It wraps fs.ErrNotExist.
var ErrNoState = fmt.Errorf("filestore: no state here: %w", fs.ErrNotExist)

// Options configure a Store.
type Options struct {
	// Logger receives the store's logs; nil discards them. The store logs
	// under the name "store".
	Logger hclog.Logger
	// Now is the wall clock for the acquired and expires times of records,
	// and for telling expired leases; nil means time.Now. Its times are
	// written in UTC. Liveness never depends on it: that is the kernel
	// lock on live.
	Now func() time.Time
	// MustExist opens only an existing state root and creates nothing:
	// a missing root (or one without a keys directory) is ErrNoState.
	// Only commands that take leases create a root (contract: command line).
	MustExist bool
}

// Store keeps leases in files under a state root. See the package comment.
type Store struct {
	root string
	real string // root with its symlinks resolved: names the key's claim
	log  hclog.Logger
	now  func() time.Time
	host string

	access statefs.Access // the store's kind (internal/statefs)

	// unguarded: the keys and guard holders a read without the guard was
	// already reported for (status), so that a waiter's status line, read
	// every second, says it once, not at every read.
	unguarded sync.Map

	mu     sync.RWMutex // guards keys.FD and top.FD against Close
	top    dir          // the root, open for the life of the Store
	keys   dir          // <root>/keys, open for the life of the Store
	closed bool
}

var _ store.Store = (*Store)(nil)

// SystemRoot is root's default state root, shared by system cron jobs and
// units whatever their $HOME.
const SystemRoot = "/var/lib/fencerun"

// DefaultRoot is the default state root: SystemRoot for root, else
// $XDG_STATE_HOME/fencerun, else $HOME/.local/state/fencerun. A relative
// XDG_STATE_HOME is ignored, as the XDG base directory specification says.
func DefaultRoot() (string, error) {
	if os.Geteuid() == 0 {
		return SystemRoot, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "fencerun"), nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		return "", errors.New("filestore: neither XDG_STATE_HOME nor HOME is set; give the state directory explicitly")
	}
	return filepath.Join(home, ".local", "state", "fencerun"), nil
}

// Open opens the state root, creating it (0700) if missing. It refuses,
// with an error wrapping store.ErrUnsafe naming the directory and the fix,
// a root that is a symlink, that is neither the caller's own (and written
// by nobody else) nor a group store the caller is a member of, or that has
// an ancestor another user can write (internal/statefs).
func Open(root string, opts Options) (*Store, error) {
	if root == "" {
		return nil, errors.New("filestore: no state directory given")
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("filestore: state directory %s: %w", root, err)
	}
	root = filepath.Clean(root)
	if err := statefs.CheckAncestors(root); err != nil {
		return nil, err
	}
	if !opts.MustExist {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return nil, fmt.Errorf("filestore: create state directory %s: %w", root, err)
		}
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT && opts.MustExist {
		return nil, fmt.Errorf("%w: state directory %s does not exist", ErrNoState, root)
	}
	if err == unix.EACCES {
		var st unix.Stat_t
		if unix.Stat(root, &st) == nil && st.Mode&0o7777 == 0o2770 {
			return nil, fmt.Errorf("%w: %s is the group store of %s, and uid %d is not a member", store.ErrUnsafe, root, statefs.GroupName(int(st.Gid)), os.Geteuid())
		}
		return nil, fmt.Errorf("%w: state directory %s is not yours to use: %w", store.ErrUnsafe, root, err)
	}
	if err != nil {
		if fi, lerr := os.Lstat(root); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%w: state directory %s is a symlink; refusing to follow it", store.ErrUnsafe, root)
		}
		return nil, fmt.Errorf("filestore: open state directory %s: %w", root, err)
	}
	a, err := statefs.RootAccess(fd, root)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	rootDir := dir{FD: fd, Path: root, Access: a}
	keys, err := rootDir.OpenDir("keys", !opts.MustExist)
	if errors.Is(err, fs.ErrNotExist) && opts.MustExist {
		rootDir.Close()
		return nil, fmt.Errorf("%w: state directory %s has no keys yet", ErrNoState, root)
	}
	if err != nil {
		rootDir.Close()
		return nil, err
	}
	s := &Store{root: root, real: root, top: rootDir, keys: keys, log: opts.Logger, access: a}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		s.real = real
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	// Every time the store writes is in UTC: encoding one in the local
	// zone loads /etc/localtime, an open and a read of every run (P1).
	s.now = func() time.Time { return now().UTC() }
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.log = s.log.Named("store")
	s.host, _ = os.Hostname()
	return s, nil
}

// Root is the state root's absolute path.
func (s *Store) Root() string { return s.root }

// Close closes the state root. Leases taken from the Store are not released
// and keep working.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.keys.Close()
		s.top.Close()
	}
	return nil
}

// TickDir is the directory for the tick sockets of commands run under
// this store (<root>/ticks), created if missing, as private as the rest of
// the state: only the store's users can enter it, so only they can reach a
// socket in it (S9).
func (s *Store) TickDir() (string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return "", ErrClosed
	}
	d, err := s.top.OpenDir(ticksDir, true)
	if err != nil {
		return "", err
	}
	d.Close()
	return d.Path, nil
}

// keyDir opens the directory of key, creating it with create. A missing
// directory gives an error that is fs.ErrNotExist.
func (s *Store) keyDir(key string, create bool) (dir, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return dir{FD: -1}, ErrClosed
	}
	return s.keys.OpenDir(encodeKey(key), create)
}

// keyNames lists the keys that have a directory, sorted. Names that are not
// encoded keys are skipped: they are not fencerun's.
func (s *Store) keyNames() ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	names, err := s.keys.List()
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(names))
	for _, name := range names {
		key, err := decodeKey(name)
		if err != nil {
			s.log.Debug("skipping a name that is not a key", "path", s.keys.Join(name))
			continue
		}
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys, nil
}

// readRecord reads the lease record of a key, and where it came from,
// which writeRecord needs. A key that never had one is a free record at
// fence 0.
func readRecord(kd dir) (record, statefs.Slotted, error) {
	f, err := kd.ReadSlotted(leaseFile)
	return recordFrom(kd, f, err)
}

// openRecord opens the key's record for reading and writing, to keep,
// and reads it through that descriptor, as readRecord reads it: a
// missing file is a free record, and no descriptor (fd -1).
func openRecord(kd dir) (keptFile, record, statefs.Slotted, error) {
	f, err := keepFile(kd, leaseFile, unix.O_RDWR)
	if errors.Is(err, fs.ErrNotExist) {
		return f, record{Schema: schemaVersion}, statefs.Slotted{}, nil
	}
	if err != nil {
		return f, record{}, statefs.Slotted{}, err
	}
	rec, cur, err := readRecordFD(kd, f.fd)
	if err != nil {
		f.close()
	}
	return f, rec, cur, err
}

// readRecordFD is readRecord through fd, the record file open.
func readRecordFD(kd dir, fd int) (record, statefs.Slotted, error) {
	path := kd.Join(leaseFile)
	raw, err := statefs.ReadFD(fd, path)
	if err != nil {
		return record{}, statefs.Slotted{}, err
	}
	f, err := statefs.ParseSlotted(raw, path)
	return recordFrom(kd, f, err)
}

// recordFrom is readRecord of f, the key's record file as read with err.
func recordFrom(kd dir, f statefs.Slotted, err error) (record, statefs.Slotted, error) {
	if errors.Is(err, fs.ErrNotExist) {
		return record{Schema: schemaVersion}, statefs.Slotted{}, nil
	}
	if err != nil {
		return record{}, f, err
	}
	r, err := parseRecord(f.Data, kd.Join(leaseFile))
	return r, f, err
}

// writeRecord writes r as the key's record over cur, what readRecord
// returned under the same guard: in place, one pwrite (internal/statefs).
func writeRecord(kd dir, cur statefs.Slotted, r *record) error {
	return kd.WriteSlotted(leaseFile, cur, r.marshal(), false)
}

// dir is an open directory of the state tree (internal/statefs): every
// file below the root is reached relative to one, with O_NOFOLLOW.
type dir = statefs.Dir

// Names in a key's directory.
const (
	guardFile  = "guard"
	liveFile   = "live"
	leaseFile  = "lease"
	cancelFile = "cancel"
	queueDir   = "queue"
)

// ticksDir is the root's directory of tick sockets (TickDir).
const ticksDir = "ticks"

// Names in the root: the store's fence counter (internal/statefs).
const (
	fencesFile  = "fences"
	counterFile = "fence-next"
)

// nextFence hands out the store's next fence, at least atLeast (a key's
// record from an earlier fencerun may carry a fence of its own). Every
// fence is above every fence the store ever handed out, for any key, so
// that Prune can remove a key's directory (S4).
func (s *Store) nextFence(atLeast uint64) (uint64, error) {
	s.mu.RLock() // keeps s.top open
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	return s.fences().Take(atLeast)
}

// repairFences restarts a reservation that cannot be read (see
// statefs.Counter.Repair). It reports whether there was anything to repair.
func (s *Store) repairFences(floorHint uint64) (bool, error) {
	s.mu.RLock() // keeps s.top open
	defer s.mu.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	r, err := s.fences().Repair(floorHint, s.now())
	if r == nil || err != nil {
		return false, err
	}
	s.log.Warn("cleared corrupt fence state", "path", r.Path, "cause", r.Cause, "fences_from", r.From)
	return true, nil
}

// fencesUsedUpAt reports whether the store's counter has no fence left
// at atLeast or above (statefs.Counter.UsedUpAt).
func (s *Store) fencesUsedUpAt(atLeast uint64) (bool, error) {
	s.mu.RLock() // keeps s.top open
	defer s.mu.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	return s.fences().UsedUpAt(atLeast)
}

// fences is the store's fence counter; the caller holds s.mu.
func (s *Store) fences() statefs.Counter {
	return statefs.Counter{Dir: s.top, Reservation: fencesFile, Lock: counterFile}
}
