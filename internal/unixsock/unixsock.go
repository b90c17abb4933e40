// Package unixsock binds and reaches unix sockets by file system path, for
// fencerun's tick and notification channels.
//
// Path sockets, unlike abstract ones, are guarded by the permissions of the
// directory they live in (a 0700 or 2770 state directory: nobody but its
// users can even connect), and are reached from any network namespace that
// shares the file system. sun_path holds at most 107 bytes; a longer path is
// reached through /proc/self/fd/N/NAME, N being a descriptor of the
// socket's directory, which the kernel resolves like any other path. That
// needs /proc: without it, only paths that fit work.
//
// What it does not do: it does not check who connects. The directory's
// permissions decide who can; callers that need more (the tick socket)
// check SO_PEERCRED themselves.
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxPath is the longest path bind and connect take (sun_path less its NUL).
const maxPath = 107

// Addr is the address at which bind and connect find name in the directory
// open as dirfd, whose path is dir: the path itself when it fits in
// sun_path, else /proc/self/fd/N/name, valid while dirfd is open.
func Addr(dirfd int, dir, name string) (string, error) {
	if p := dir + "/" + name; len(p) <= maxPath {
		return p, nil
	}
	p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
	if len(p) > maxPath {
		return "", fmt.Errorf("unixsock: socket name %q is too long", name)
	}
	return p, nil
}

// ListenStream binds a stream socket at name in the directory open as
// dirfd (path dir), its file's mode set to mode explicitly (never left to
// the umask). The socket is bound under a temporary name and renamed to
// name once it listens, so that a socket file by its final name is always
// one that was ready: Stale can tell a dead one from one being bound. The
// socket file is not removed on close: Remove it.
//
// The socket is made, bound and set listening here, then handed to package
// net: net.ListenUnix reads /proc/sys/net/core/somaxconn first, about 0.1
// ms of every run's start on this machine (P1, P4). The backlog asked for
// is net's largest, which the kernel cuts to somaxconn, as net does.
func ListenStream(dirfd int, dir, name string, mode uint32) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := listen(dirfd, dir, name, mode, func(addr string) (io.Closer, error) {
		var err error
		ln, err = listenStream(addr)
		return ln, err
	})
	return ln, err
}

// maxBacklog is the backlog net asks listen(2) for at most.
const maxBacklog = 1<<16 - 1

// listenStream is net.ListenUnix("unix", addr), without net's read of
// somaxconn, the errors as net's would read. The listener does not remove
// the socket file on close: addr may name another file by then.
func listenStream(addr string) (*net.UnixListener, error) {
	fail := func(call string, err error) error {
		return &net.OpError{Op: "listen", Net: "unix", Addr: &net.UnixAddr{Name: addr, Net: "unix"}, Err: os.NewSyscallError(call, err)}
	}
	// Blocking here, so that os.NewFile below does not add it to the
	// poller only for FileListener to take it out again; net makes its
	// own copy non-blocking.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fail("socket", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: addr}); err != nil {
		unix.Close(fd)
		return nil, fail("bind", err)
	}
	if err := unix.Listen(fd, maxBacklog); err != nil {
		unix.Close(fd)
		return nil, fail("listen", err)
	}
	f := os.NewFile(uintptr(fd), addr)
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	ln, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("unixsock: listen on %s: not a unix socket", addr)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// ListenPacket binds a datagram socket as ListenStream binds a stream one.
func ListenPacket(dirfd int, dir, name string, mode uint32) (*net.UnixConn, error) {
	var c *net.UnixConn
	err := listen(dirfd, dir, name, mode, func(addr string) (io.Closer, error) {
		var err error
		c, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
		return c, err
	})
	return c, err
}

func listen(dirfd int, dir, name string, mode uint32, bind func(addr string) (io.Closer, error)) error {
	tmp := bindPrefix + name
	addr, err := Addr(dirfd, dir, tmp)
	if err != nil {
		return err
	}
	path := dir + "/" + name
	c, err := bind(addr)
	if err != nil {
		return fmt.Errorf("unixsock: listen on %s: %w", path, err)
	}
	if err := unix.Fchmodat(dirfd, tmp, mode, 0); err != nil {
		c.Close()
		unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("unixsock: chmod %s: %w", path, err)
	}
	if err := unix.Renameat2(dirfd, tmp, dirfd, name, unix.RENAME_NOREPLACE); err != nil {
		c.Close()
		unix.Unlinkat(dirfd, tmp, 0)
		if err == unix.EEXIST {
			err = unix.EADDRINUSE // as a bind at name would have said
		}
		return fmt.Errorf("unixsock: listen on %s: %w", path, err)
	}
	return nil
}

// bindPrefix starts the temporary name a socket is bound under before it
// is renamed to its own. It starts as statefs.TempPrefix does, so that the
// state directories' sweeps of crashed writers' files take it too.
const bindPrefix = ".tmp-bind-"

// BindPrefix is bindPrefix, for the directories no guard lock sweeps
// (LeftInBind).
const BindPrefix = bindPrefix

// BindAge is how old a socket file under a temporary name must be before
// LeftInBind takes it for a dead process's. A bind in progress shows as
// unbound only inside its own system call (the file exists a moment
// before the kernel files the socket under it), never for a minute; a
// test shortens it.
var BindAge = time.Minute

// LeftInBind reports whether name (BindPrefix and the socket's own name)
// in the directory open as dirfd is what Listen* left when its process
// died between the bind and the rename (SIGKILL): a socket file that is
// Stale and older than BindAge. Where a guard lock keeps binders out, any
// temporary name is a crashed one's; this is for where none does.
func LeftInBind(dirfd int, dir, name string) bool {
	var st unix.Stat_t
	if len(name) <= len(bindPrefix) || name[:len(bindPrefix)] != bindPrefix ||
		unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		time.Since(time.Unix(st.Ctim.Unix())) < BindAge {
		return false
	}
	return Stale(dirfd, dir, name)
}

// Stale reports whether name, in the directory open as dirfd (path dir), is
// a socket file that no socket is bound to any more: its process died
// without removing it. A socket being bound is never stale (Listen*
// renames it into place bound). The probe is a datagram connect, which
// a live stream socket refuses by its type (EPROTOTYPE) and a live
// datagram one takes without a byte sent: no server ever sees it. Only
// the kernel's "nothing is bound there" (ECONNREFUSED) makes it stale;
// anything else (no permission, a name too long) keeps the file.
func Stale(dirfd int, dir, name string) bool {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return false
	}
	addr, err := Addr(dirfd, dir, name)
	if err != nil {
		return false
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: addr}) == unix.ECONNREFUSED
}

// RemoveStale removes name in the directory open as dirfd if it is Stale,
// and reports whether it did. A stale socket cannot come back to life (a
// bind at its path fails while the file is there), so nothing live is
// removed between the probe and the unlink.
func RemoveStale(dirfd int, dir, name string) bool {
	return Stale(dirfd, dir, name) && unix.Unlinkat(dirfd, name, 0) == nil
}

// Remove unlinks the socket file name in the directory open as dirfd, if
// it is a socket.
func Remove(dirfd int, name string) {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		unix.Unlinkat(dirfd, name, 0)
	}
}

// Dial connects to the socket at path (absolute), however long it is.
func Dial(ctx context.Context, network, path string) (net.Conn, error) {
	dir, name := filepath.Split(path)
	dir = filepath.Clean(dir)
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("unixsock: open %s: %w", dir, err)
	}
	defer unix.Close(dirfd) // connect has resolved the path by then
	return DialAt(ctx, network, dirfd, dir, name)
}

// DialAt connects to the socket name in the directory open as dirfd.
func DialAt(ctx context.Context, network string, dirfd int, dir, name string) (net.Conn, error) {
	addr, err := Addr(dirfd, dir, name)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("unixsock: connect to %s/%s: %w", dir, name, err)
	}
	return c, nil
}

// A Claim is a name in the abstract socket namespace held by one process:
// it cannot be unlinked, renamed or moved, and the kernel frees it when
// the process dies, however it dies. fencerun holds one per key or store
// path for as long as a holder's command tree may run, so a newcomer whose
// state files were moved or unlinked under a live holder still meets it.
// Abstract names are per network namespace, and anyone in it may bind one:
// the caller decides whom to believe by the holder's uid (its
// SO_PEERCRED, or, when its listen backlog is full, the kernel's socket
// table: diag_linux.go).
type Claim struct {
	ln       *net.UnixListener
	name     string
	released bool
}

// TakeClaim binds the abstract name name. When someone else holds it, it
// returns a nil Claim and the holder's uid (-1 when that cannot be told).
//
// A name held only by a copy of a listener of this very process that it
// no longer holds itself is not a holder: a child between fork and exec
// keeps the copy (close-on-exec) after the Release, until its exec, which
// is microseconds away on a quiet machine but may be hundreds of
// milliseconds on a loaded one. Such a name is tried again for up to
// ownCopySettle, and one whose holder cannot be told (its last descriptor
// closing as it exits) for up to claimSettle from when it was first seen
// so: the copy's own end passes through that state, as its socket is
// released, after the copy was waited for.
func TakeClaim(name string) (*Claim, int, error) {
	start := time.Now()
	var unknownSince time.Time
	for {
		c, uid, pid, err := takeClaim(name)
		if c != nil || err != nil {
			return c, uid, err
		}
		var waited, settle time.Duration
		switch {
		case pid == os.Getpid() && !holding(name):
			waited, settle = time.Since(start), ownCopySettle
		case uid < 0:
			if unknownSince.IsZero() {
				unknownSince = time.Now()
			}
			waited, settle = time.Since(unknownSince), claimSettle
		}
		if waited >= settle {
			return nil, uid, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// claimSettle bounds how long TakeClaim waits out a name whose holder
// cannot be told; ownCopySettle, one held only by a copy of this
// process's own released listener, which nothing but a child's exec or
// exit can take away (no real holder is ever waited for so).
const (
	claimSettle   = 100 * time.Millisecond
	ownCopySettle = 2 * time.Second
)

func takeClaim(name string) (c *Claim, uid, pid int, err error) {
	claims.Lock()
	ln, err := listenStream("@" + name)
	if err == nil {
		claims.held[name] = true
		claims.Unlock()
		return &Claim{ln: ln, name: name}, 0, 0, nil
	}
	claims.Unlock()
	if !errors.Is(err, unix.EADDRINUSE) {
		return nil, 0, 0, fmt.Errorf("unixsock: claim %s: %w", name, err)
	}
	// Who holds it: its credentials, connecting; when a full backlog
	// (diag_linux.go) or anything else keeps the connect from telling, the
	// kernel's socket table.
	unknown := func() (*Claim, int, int, error) {
		if uid, ok := listenerUID(name); ok {
			return nil, uid, 0, nil
		}
		return nil, -1, 0, nil
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return unknown()
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + name}); err != nil {
		return unknown()
	}
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return unknown()
	}
	// A listener's credentials are those of the process that bound it.
	return nil, int(cred.Uid), int(cred.Pid), nil
}

// claims are the names this process holds.
var claims = struct {
	sync.Mutex
	held map[string]bool
}{held: map[string]bool{}}

func holding(name string) bool {
	claims.Lock()
	defer claims.Unlock()
	return claims.held[name]
}

// Release gives the name up.
func (c *Claim) Release() {
	if c != nil {
		claims.Lock()
		defer claims.Unlock()
		if claims.held[c.name] && !c.released {
			delete(claims.held, c.name)
		}
		c.released = true
		c.ln.Close()
	}
}
