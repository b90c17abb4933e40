// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) both
// ways, for SPEC.md N1: Send writes a message to the service manager's
// socket (NOTIFY_SOCKET), and a Listener is a notify socket of fencerun's
// own, which the command it runs is given as its NOTIFY_SOCKET, so that
// fencerun can relay what the command says from its own pid.
//
// What it guarantees:
//
//   - Send reaches NOTIFY_SOCKET as sd_notify does: one datagram, from a
//     socket made for it (so a service manager that re-executed itself and
//     bound its socket anew is still reached), a path or, with a leading
//     '@', a name in the abstract namespace. The kernel stamps the
//     datagram with the sender's credentials (SCM_CREDENTIALS, the
//     receiver's SO_PASSCRED): its pid is this process's. Send never
//     blocks: one send, MSG_DONTWAIT, so that a service manager that does
//     not read its socket loses the message, not fencerun's time (and no
//     deadline that a process descheduled on a loaded machine would find
//     passed before it tried).
//   - A Listener returns each datagram with the pid the kernel stamped on
//     it, never one the sender claimed: a datagram without credentials,
//     or one cut short (longer than MaxMessage, or with more ancillary
//     data than it reads), is dropped whole. Descriptors passed with a
//     datagram (FDSTORE, BARRIER=1's pipe) are closed when Read is
//     called again or the Listener is closed, never kept: a
//     sender that waits on a barrier learns that what it sent before was
//     read. Reads are bounded: one datagram of at most MaxMessage bytes at
//     a time, in a buffer allocated once.
//   - The Listener's socket is a path in a directory the caller chose
//     (reached from any network namespace that shares the file system,
//     as the tick socket is), mode 0600 set explicitly; Close removes it.
//
// What it does not do: decide whom to believe. A Listener hands every
// datagram and its pid to the caller, which checks that the pid is of the
// command's tree. It does not support NOTIFY_SOCKET's vsock: form.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// MaxMessage is the longest datagram a Listener takes, systemd's own
// bound (NOTIFY_BUFFER_MAX, PIPE_BUF).
const MaxMessage = 4096

// ErrAddress: NOTIFY_SOCKET names no socket this package can reach.
var ErrAddress = errors.New("sdnotify: unsupported NOTIFY_SOCKET")

// Send writes state (newline-separated VAR=value assignments) to the
// socket addr names, as one datagram.
func Send(addr, state string) error {
	if addr == "" || addr[0] != '/' && addr[0] != '@' {
		return fmt.Errorf("%w: %q (a path or an @abstract name)", ErrAddress, addr)
	}
	// net translates a leading '@' into the abstract namespace's NUL.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	var serr error
	if err := raw.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgN(int(fd), []byte(state), nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		return true // one try: never wait for room
	}); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", addr, serr)
	}
	return nil
}

// Message is one datagram a Listener read.
type Message struct {
	// PID is the sender's, as the kernel stamped it.
	PID int
	// State is the datagram's text: newline-separated VAR=value.
	State string
}

// Fields are m's assignments, one a line, empty lines left out.
func (m Message) Fields() []string {
	var out []string
	for _, f := range strings.Split(m.State, "\n") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Listener is a notify socket of fencerun's own.
type Listener struct {
	c     *net.UnixConn
	dirfd int
	name  string
	addr  string
	buf   []byte
	oob   []byte
	held  []int // descriptors the last datagram passed, closed at the next Read

	closing  sync.Once
	closeErr error
}

// maxFDs is how many descriptors a datagram may pass (systemd's FDSTORE
// takes 768 a message; a relay needs none): ancillary data beyond them
// is cut short by the kernel, and the datagram dropped.
const maxFDs = 16

// Listen binds a datagram socket at name in dir, an existing directory
// that only the store's users can enter (the caller checks that).
func Listen(dir, name string) (*Listener, error) {
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sdnotify: socket directory %s: %w", dir, err)
	}
	c, err := unixsock.ListenPacket(dirfd, dir, name, 0o600)
	if err != nil {
		unix.Close(dirfd)
		return nil, fmt.Errorf("sdnotify: %w", err)
	}
	l := &Listener{c: c, dirfd: dirfd, name: name, addr: dir + "/" + name, buf: make([]byte, MaxMessage+1),
		oob: make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(4*maxFDs))}
	if err := l.passCred(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// passCred asks the kernel to stamp every datagram with its sender's
// credentials. It is set before the socket's address is given to anyone.
func (l *Listener) passCred() error {
	raw, err := l.c.SyscallConn()
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("sdnotify: SO_PASSCRED: %w", serr)
	}
	return nil
}

// Addr is the socket's path: the command's NOTIFY_SOCKET.
func (l *Listener) Addr() string { return l.addr }

// Read waits for the next datagram that carries its sender's
// credentials and is whole, and returns it. It returns an error wrapping
// net.ErrClosed once the Listener is closed. Call it from one goroutine.
func (l *Listener) Read() (Message, error) {
	for {
		l.closeHeld()
		n, oobn, flags, _, err := l.c.ReadMsgUnix(l.buf, l.oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.closeHeld()
				return Message{}, err
			}
			return Message{}, fmt.Errorf("sdnotify: %w", err)
		}
		pid := l.parse(l.oob[:oobn])
		if pid <= 0 || n > MaxMessage || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			continue
		}
		return Message{PID: pid, State: string(l.buf[:n])}, nil
	}
}

// parse reads the ancillary data: the sender's pid (0 when there is none),
// and the descriptors passed, kept to be closed at the next Read.
func (l *Listener) parse(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	pid := 0
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case unix.SCM_CREDENTIALS:
			if cred, err := unix.ParseUnixCredentials(&m); err == nil {
				pid = int(cred.Pid)
			}
		case unix.SCM_RIGHTS:
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				l.held = append(l.held, fds...)
			}
		}
	}
	return pid
}

func (l *Listener) closeHeld() {
	for _, fd := range l.held {
		unix.Close(fd)
	}
	l.held = l.held[:0]
}

// Close closes the socket and removes its file; a Read waiting returns,
// closing the descriptors it held. Later calls do nothing.
func (l *Listener) Close() error {
	l.closing.Do(func() {
		l.closeErr = l.c.Close()
		unixsock.Remove(l.dirfd, l.name)
		unix.Close(l.dirfd)
	})
	return l.closeErr
}

// Env is environ with the notify protocol's variables replaced: with
// addr, NOTIFY_SOCKET=addr and, with watchdog, WATCHDOG_USEC (without
// WATCHDOG_PID, which names whoever is to feed it and is not known before
// the command's fork: without it, any process given the variable may);
// with addr empty, none of them. It never changes environ.
func Env(environ []string, addr string, watchdog time.Duration) []string {
	out := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID":
			continue
		}
		out = append(out, kv)
	}
	if addr != "" {
		out = append(out, "NOTIFY_SOCKET="+addr)
		if watchdog > 0 {
			out = append(out, fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds()))
		}
	}
	return out
}

// Watchdog is the interval the service manager expects WATCHDOG=1 at
// from this process, from environ's WATCHDOG_USEC, or 0: none, or
// WATCHDOG_PID names another process.
func Watchdog(getenv func(string) string) time.Duration {
	usec := getenv("WATCHDOG_USEC")
	if usec == "" {
		return 0
	}
	if p := getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(os.Getpid()) {
		return 0
	}
	n, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Microsecond
}
