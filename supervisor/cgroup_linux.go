package supervisor

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// mountinfo and selfCgroup are where FindHierarchy looks: the mounts of this
// process and its cgroup membership.
const (
	mountinfo  = "/proc/self/mountinfo"
	selfCgroup = "/proc/self/cgroup"
)

// cgroupPrefix starts the name of every cgroup fencerun creates; a path read
// from a record is only acted on if its last element has this form.
const cgroupPrefix = "fencerun-"

// Hierarchy is the writable cgroup v2 directory this process runs in, below
// which it creates its commands' cgroups. A command's cgroup below a
// fencerun's command cgroup is nested in it, so a fencerun run inside a
// contained command nests its cgroup too.
type Hierarchy struct {
	mount string // the cgroup2 mount point
	root  string // the hierarchy's directory mounted there
	dir   string // this process's own cgroup, under mount
}

// FindHierarchy finds the cgroup v2 hierarchy in this process's mounts (a unified
// system's /sys/fs/cgroup or a hybrid one's /sys/fs/cgroup/unified) and
// this process's cgroup in it, and checks that this process may create a
// cgroup there (as root, or in a subtree delegated to it). The error says
// why there is none.
func FindHierarchy() (*Hierarchy, error) {
	h, err := findHierarchy(mountinfo)
	if err == nil {
		found.Store(h)
	}
	return h, err
}

// found is the hierarchy FindHierarchy found in this process, if it was
// called: creating and opening the cgroups below it reads the mounts from
// it, not from mountinfo again (a run read mountinfo twice for its one
// cgroup, 50 µs each; P1). The cgroup2 mount of a running process does not
// move; should it, the cgroup made below the old one fails to be created,
// which the run reports.
var found atomic.Pointer[Hierarchy]

// mounted is cgroup2Mount of this process's mounts, or the mount
// FindHierarchy found.
func mounted() (mount, root string, err error) {
	if h := found.Load(); h != nil {
		return h.mount, h.root, nil
	}
	return cgroup2Mount(mountinfo)
}

// findHierarchy is FindHierarchy with the mounts read from the file mounts.
func findHierarchy(mounts string) (*Hierarchy, error) {
	mount, root, err := cgroup2Mount(mounts)
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup(selfCgroup)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, own)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("supervisor: this process's cgroup %s is outside the mounted cgroup2 hierarchy %s", own, mount)
	}
	h := &Hierarchy{mount: mount, root: root, dir: filepath.Join(mount, rel)}
	if err := unix.Access(h.dir, unix.W_OK|unix.X_OK); err != nil {
		return nil, fmt.Errorf("supervisor: cannot create cgroups in %s: %w", h.dir, err)
	}
	return h, nil
}

// NewPath returns a fresh, unique path for a command's cgroup, not yet
// created: the lease records it before the command starts.
func (h *Hierarchy) NewPath() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return filepath.Join(h.dir, cgroupPrefix+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b[:]))
}

// cgroup2Mount reads the first cgroup2 mount of mountinfo: its mount point
// and the hierarchy's directory mounted there. A read-only mount is an
// error that says so.
func cgroup2Mount(mountinfo string) (mount, root string, err error) {
	b, err := readProcFile(mountinfo)
	if err != nil {
		return "", "", fmt.Errorf("supervisor: reading mounts: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 6 || len(g) < 1 || g[0] != "cgroup2" {
			continue
		}
		mount, root = unescapeMount(f[4]), unescapeMount(f[3])
		for _, o := range strings.Split(f[5], ",") {
			if o == "ro" {
				return "", "", fmt.Errorf("supervisor: the cgroup2 hierarchy at %s is mounted read-only", mount)
			}
		}
		if st, err := os.Stat(mount); err != nil || !st.IsDir() {
			return "", "", fmt.Errorf("supervisor: the cgroup2 hierarchy at %s is missing: %v", mount, err)
		}
		return mount, root, nil
	}
	return "", "", errors.New("supervisor: no cgroup2 hierarchy is mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup reads this process's cgroup v2 path ("0::/PATH").
func ownCgroup(file string) (string, error) {
	b, err := readProcFile(file)
	if err != nil {
		return "", fmt.Errorf("supervisor: reading this process's cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("supervisor: %s names no cgroup v2 membership", file)
}

// cgroup is a command's cgroup: the tree is exactly its processes (and its
// nested cgroups'), stopping ends with cgroup.kill, and the tree is gone
// when cgroup.events says "populated 0". The tree is the cgroup alone: a
// process that root moves out of it (systemd-run --scope, a container
// runtime) is no longer the command's, and no /proc is read to find one.
type cgroup struct {
	path string
	own  string // the path as /proc/PID/cgroup shows it ("0::" + own)
	fd   int    // the directory, O_RDONLY: for clone3's CLONE_INTO_CGROUP
}

// createCgroup creates the cgroup at path, once the lease it is recorded
// in is held, just before the command starts in it; it fails where the
// kernel has no cgroup.kill (before 5.14), which containment relies on.
func createCgroup(path string) (*cgroup, error) {
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, fmt.Errorf("supervisor: creating cgroup: %w", err)
	}
	c, err := openCgroup(path)
	if err == nil {
		if _, err = os.Stat(filepath.Join(path, "cgroup.kill")); err != nil {
			c.close()
			err = fmt.Errorf("supervisor: cgroup %s has no cgroup.kill (Linux 5.14 or later needed)", path)
		}
	}
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return c, nil
}

// treeXattr binds a cgroup to the run that made it: fencerun sets it, when
// it creates a command's cgroup, to the SHA-256 of the run's marker. A
// record of a shared store (store.Leftover.Shared), which users less
// trusted than the stopper may have written, directs signals at a cgroup
// only where the record's marker hashes to this value. The backend keeps a
// shared record's marker only if it is of that store's own tick channel,
// so a member cannot name the cgroup of another store's run, such as a
// root job of root's private store; only root (or a delegated owner) can
// set the attribute on a cgroup it made.
const treeXattr = "user.fencerun.tree"

func markerDigest(marker string) string {
	sum := sha256.Sum256([]byte(marker))
	return hex.EncodeToString(sum[:])
}

// bindCgroup ties the cgroup at path to marker (see treeXattr).
func bindCgroup(path, marker string) error {
	return unix.Setxattr(path, treeXattr, []byte(markerDigest(marker)), 0)
}

// boundTo reports whether the cgroup at path was made for the run that
// marker names.
func boundTo(path, marker string) bool {
	if marker == "" {
		return false
	}
	buf := make([]byte, 2*sha256.Size)
	n, err := unix.Getxattr(path, treeXattr, buf)
	return err == nil && string(buf[:n]) == markerDigest(marker)
}

// openCgroup opens an existing cgroup; fs.ErrNotExist when it is gone.
func openCgroup(path string) (*cgroup, error) {
	mount, root, err := mounted()
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(mount, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("supervisor: cgroup %s is outside the cgroup2 hierarchy %s", path, mount)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil, fs.ErrNotExist
		}
		return nil, fmt.Errorf("supervisor: opening cgroup %s: %w", path, err)
	}
	return &cgroup{path: path, own: filepath.Join(root, rel), fd: fd}, nil
}

func (c *cgroup) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// openEvents opens cgroup.events for readPopulated and poll(2): after a
// reading, POLLPRI says it changed, the kernel's word that the tree may be
// gone.
func (c *cgroup) openEvents() (int, error) {
	fd, err := unix.Openat(c.fd, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("supervisor: opening %s/cgroup.events: %w", c.path, err)
	}
	return fd, nil
}

// readPopulated reads cgroup.events through fd, from its start: whether a
// live process is left in the cgroup or below it (a zombie is not
// counted). Reading through the polled descriptor is what re-arms POLLPRI.
func readPopulated(fd int, path string) (bool, error) {
	var b [256]byte
	n, err := unix.Pread(fd, b[:], 0)
	if err == unix.ENODEV {
		return false, nil // removed: nothing can be in it
	}
	if err != nil {
		return false, fmt.Errorf("supervisor: reading %s/cgroup.events: %w", path, err)
	}
	for _, line := range strings.Split(string(b[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("supervisor: %s/cgroup.events has no populated line", path)
}

// member is a process of the cgroup, held by a pidfd.
type member struct {
	pid, pgid, fd int
}

// track opens pidfds on up to max processes of the cgroup, each checked to
// be in it (so that a reused pid is never taken for a member). Where /proc
// is another namespace's it tracks none.
func (c *cgroup) track(max int) []member {
	if foreignProc() {
		return nil
	}
	pids, _ := c.pids()
	var ms []member
	for _, pid := range pids {
		if len(ms) == max {
			break
		}
		if pid == os.Getpid() {
			continue
		}
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		if err != nil {
			continue // gone
		}
		q, err := readProc(pid)
		if err != nil || q.dead() || !c.has(pid) {
			unix.Close(fd)
			continue
		}
		ms = append(ms, member{pid: pid, pgid: q.pgid, fd: fd})
	}
	return ms
}

// pids lists the processes of the cgroup and of the cgroups below it,
// each once. A threaded cgroup (the command may make one below its own,
// or make its own one) has no process list: its threads' processes are
// read from its cgroup.threads.
func (c *cgroup) pids() ([]int, error) {
	var pids []int
	seen := map[int]bool{}
	err := filepath.WalkDir(c.path, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := readProcFile(filepath.Join(path, "cgroup.procs"))
		threads := errors.Is(err, syscall.EOPNOTSUPP)
		if threads {
			b, err = readProcFile(filepath.Join(path, "cgroup.threads"))
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
				return nil
			}
			return err
		}
		for _, f := range bytes.Fields(b) {
			pid, err := strconv.Atoi(string(f))
			if err == nil && threads {
				pid, err = threadGroup(pid)
			}
			if err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("supervisor: reading the processes of cgroup %s: %w", c.path, err)
	}
	return pids, nil
}

// threadGroup is the process (thread group id) thread tid is of.
func threadGroup(tid int) (int, error) {
	b, err := readProcFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("supervisor: /proc/%d/status has no Tgid", tid)
}

// has reports whether pid is a live process of the cgroup or below it.
func (c *cgroup) has(pid int) bool {
	own, err := ownCgroup("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && (own == c.own || strings.HasPrefix(own, c.own+"/"))
}

// kill writes cgroup.kill: the kernel SIGKILLs every process of the cgroup
// and below, atomically against forks.
func (c *cgroup) kill() error {
	err := os.WriteFile(filepath.Join(c.path, "cgroup.kill"), []byte("1"), 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("supervisor: writing %s/cgroup.kill: %w", c.path, err)
	}
	return nil
}

// cannotStop is the error of a cgroup.kill that failed with err: where
// this process may not write it (another user's cgroup: root's, in a
// group store), it names the processes left in it and their uids, which
// is what whoever reads the message must know.
func (c *cgroup) cannotStop(err error) error {
	pids, perr := c.pids()
	if !errors.Is(err, fs.ErrPermission) || perr != nil || len(pids) == 0 {
		return err
	}
	errs := make([]error, len(pids))
	for i, pid := range pids {
		errs[i] = cannotStopPid(pid, fs.ErrPermission)
	}
	return errors.Join(errs...)
}

// remove removes the cgroup and the (empty) cgroups nested in it, deepest
// first: a nested fencerun that was killed leaves its own behind. The
// usual cgroup has none, and goes with one rmdir.
func (c *cgroup) remove() error {
	c.close()
	if err := unix.Rmdir(c.path); err == nil || err == unix.ENOENT {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(c.path, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var err error
	for i := len(dirs) - 1; i >= 0; i-- {
		if e := unix.Rmdir(dirs[i]); e != nil && e != unix.ENOENT {
			err = fmt.Errorf("supervisor: removing cgroup %s: %w", dirs[i], e)
		}
	}
	return err
}

// validCgroup checks a cgroup path read from a record: it must be a clean
// absolute path inside the cgroup2 hierarchy whose last element fencerun
// could have created, so that a record can never name another cgroup.
func validCgroup(path string) error {
	mount, _, err := mounted()
	if err != nil {
		return err
	}
	base := filepath.Base(path)
	switch {
	case filepath.Clean(path) != path || !filepath.IsAbs(path):
		return fmt.Errorf("supervisor: cgroup path %q is not clean and absolute", path)
	case !strings.HasPrefix(path, mount+"/"):
		return fmt.Errorf("supervisor: cgroup path %q is outside the cgroup2 hierarchy %s", path, mount)
	case !strings.HasPrefix(base, cgroupPrefix):
		return fmt.Errorf("supervisor: cgroup path %q was not made by fencerun", path)
	}
	return nil
}
