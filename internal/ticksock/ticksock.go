// Package ticksock is the tick socket: the holder's end of `fencerun
// tick` (Server), the command's (Send), and the marker that names a
// command's tree by its socket (Marker, FENCERUN_TICK=ADDR, checked back
// with IsAddr). It guarantees that a tick is taken only from a process of
// the command's tree (R6) and that only the holder stamps it; it does not
// decide what a tick means (the watchdog does).
package ticksock

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/unixsock"
)

// ErrRefused: the holder would not take the tick, because the caller is
// not a process of the command it runs.
var ErrRefused = errors.New("ticksock: tick refused")

// Server is the holder's end of `fencerun tick`: a unix stream socket
// with an unguessable name in a directory that only the store's users can
// enter, given to the command as FENCERUN_TICK (a path, so it is reached
// from any network namespace). A connection is accepted only from a peer
// (by SO_PEERCRED, read at once on accept) that is a process of the
// command's tree: another user's is answered "refused" and hung up on
// before it holds a slot (and other users cannot reach the socket at all);
// a process of the holder's own user that is not of the tree (yet: a
// command may tick before the holder has seen its own fork return) waits,
// in slots of its own so that it never takes the tree's (R6), until the
// tree is known and then up to a second more. The holder then stamps the
// tick itself: only the holding process writes its record.
type Server struct {
	ln    *net.UnixListener
	dirfd int
	name  string
	addr  string
	log   hclog.Logger
	// moment is how long a peer of our own user not owned once the tree
	// is known is asked about again (a second; shorter in tests).
	moment time.Duration

	// closing makes Close once; a Close while another runs waits until the
	// socket file is gone (the run closes it at its end, and the process
	// exits right after).
	closing  sync.Once
	closeErr error

	mu        sync.Mutex
	refusedAt time.Time // rate limit of the refusal warning
	refused   int       // refusals not logged since
}

// tickPrefix starts the name of every tick socket; TickAddr describes the
// whole form.
const tickPrefix = "t-"

// Marker is the environment entry that marks the process tree of the
// command behind tick address addr: FENCERUN_TICK=addr. It is the one place
// the marker's form is made; IsAddr checks an address read back.
func Marker(addr string) string { return "FENCERUN_TICK=" + addr }

// IsAddr reports whether addr has the form of a tick address that
// Listen gives out: an absolute, clean path whose last element is
// "t-" and 32 lowercase hex digits. Markers read from records should be
// checked with it before they are searched for.
func IsAddr(addr string) bool {
	if !filepath.IsAbs(addr) || filepath.Clean(addr) != addr {
		return false
	}
	base := filepath.Base(addr)
	if !strings.HasPrefix(base, tickPrefix) || len(base) != len(tickPrefix)+32 {
		return false
	}
	for _, c := range base[len(tickPrefix):] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Listen opens the socket in dir, an existing directory that only the
// store's users can enter (the caller checks that). Connections wait in its
// backlog until Serve.
func Listen(dir string, log hclog.Logger) (*Server, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("ticksock: tick socket name: %w", err)
	}
	name := tickPrefix + hex.EncodeToString(b[:])
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ticksock: tick socket directory %s: %w", dir, err)
	}
	ln, err := unixsock.ListenStream(dirfd, dir, name, 0o600)
	if err != nil {
		unix.Close(dirfd)
		return nil, fmt.Errorf("ticksock: tick socket: %w", err)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Server{ln: ln, dirfd: dirfd, name: name, addr: filepath.Join(dir, name), log: log, moment: time.Second}, nil
}

// Addr is the value of FENCERUN_TICK.
func (s *Server) Addr() string { return s.addr }

// Serve answers ticks until Close: a peer for which owns(pid) is true gets
// onTick called and "ok"; any other is refused. known is closed once owns
// can answer for the command's tree (it started, or it never will): a peer
// of our own user that owns refuses before then is asked about again
// after, not after a fixed time, which a loaded machine can outlast
// between the command's fork and the holder learning its pid. It returns
// nil once closed. Nothing a caller does ends Serve: accept errors (EMFILE, say) are
// logged and retried with a backoff, and at most maxCallers of the tree's
// processes are answered at once, each for at most callerDeadline, beside
// at most maxCallers of our own user's not yet known; one beyond that is
// hung up on.
func (s *Server) Serve(owns func(pid int) bool, known <-chan struct{}, onTick func(time.Time)) error {
	callers := make(chan struct{}, maxCallers)
	pending := make(chan struct{}, maxCallers)
	backoff := 10 * time.Millisecond
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.log.Warn("tick socket: accept failed; retrying", "error", err, "in", backoff)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		pid, uid, err := peerCred(c)
		owned := err == nil && owns(pid)
		// A process of our own user that is not (yet) of the tree may be
		// the command ticking before its start was seen: it is given a
		// slot until the tree is known, and a moment. Anyone else is
		// refused at once.
		if !owned && (err != nil || uid != os.Geteuid()) {
			s.refuse(c, pid, err)
			continue
		}
		if !owned {
			// Its own slots, so that such peers never take the tree's.
			select {
			case pending <- struct{}{}:
				go func() {
					defer func() { <-pending }()
					if !ownsSoon(owns, known, pid, s.moment) {
						s.refuse(c, pid, nil)
						return
					}
					s.answer(c, onTick)
				}()
			default:
				c.Close()
			}
			continue
		}
		select {
		case callers <- struct{}{}:
			go func() {
				defer func() { <-callers }()
				s.answer(c, onTick)
			}()
		default:
			c.Close()
		}
	}
}

// refuse answers a peer that is not of the command's tree, without reading
// from it or waiting on it, and hangs up. Refusals are logged at most once
// a second, so that nobody can flood the holder's log.
func (s *Server) refuse(c *net.UnixConn, pid int, err error) {
	reply := fmt.Sprintf("refused: pid %d is not a process of the command this holder runs", pid)
	if err != nil {
		reply = "refused: " + err.Error()
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_, _ = c.Write([]byte(reply + "\n"))
	c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused++
	if now := time.Now(); now.Sub(s.refusedAt) >= time.Second {
		s.log.Warn("tick refused", "reason", reply, "refused_since_last_warning", s.refused)
		s.refusedAt, s.refused = now, 0
	}
}

const (
	maxCallers     = 16
	callerDeadline = 2 * time.Second
	// maxRequest bounds what is read of a tick request ("tick\n"), and
	// maxAnswer of the holder's answer (a refusal names its reason): a peer
	// that writes without end is hung up on (issue 26).
	maxRequest = 64
	maxAnswer  = 4 << 10
)

// readLine reads one line of at most max bytes from c; a longer one, or
// none, is an error.
func readLine(c net.Conn, max int64) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(c, max)).ReadString('\n')
	if err == io.EOF && int64(len(line)) == max {
		return "", errLineTooLong
	}
	return line, err
}

var errLineTooLong = errors.New("ticksock: line too long")

func (s *Server) answer(c *net.UnixConn, onTick func(time.Time)) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(callerDeadline))
	// Read the request before answering: closing with it unread would
	// break the caller's write.
	req, err := readLine(c, maxRequest)
	if err != nil || strings.TrimSpace(req) != "tick" {
		return
	}
	onTick(time.Now())
	_, _ = c.Write([]byte("ok\n"))
}

// Close stops Serve and removes the socket; every call returns once it is
// removed.
func (s *Server) Close() error {
	s.closing.Do(func() {
		s.closeErr = s.ln.Close()
		unixsock.Remove(s.dirfd, s.name)
		unix.Close(s.dirfd)
	})
	return s.closeErr
}

// ownsSoon asks owns again once the tree is known (a command that ticks at
// once may connect before the holder saw it start), and then for a moment:
// a process of the tree may be found by an ancestor's environment, which
// reads as empty while that ancestor is in the middle of an exec.
func ownsSoon(owns func(pid int) bool, known <-chan struct{}, pid int, moment time.Duration) bool {
	<-known
	if owns(pid) {
		return true
	}
	for deadline := time.Now().Add(moment); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if owns(pid) {
			return true
		}
	}
	return false
}

func peerCred(c *net.UnixConn) (pid, uid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if gerr != nil {
		return 0, 0, fmt.Errorf("peer credentials: %w", gerr)
	}
	return int(cred.Pid), int(cred.Uid), nil
}

// Send is `fencerun tick`: it asks the holder behind addr (the value of
// FENCERUN_TICK) to stamp a liveness tick, and returns once the holder took
// it, or an error saying why not (ErrRefused when the holder refused).
func Send(ctx context.Context, addr string) error {
	if !IsAddr(addr) {
		return fmt.Errorf("ticksock: FENCERUN_TICK=%q is not an address fencerun gave out", addr)
	}
	conn, err := unixsock.Dial(ctx, "unix", addr)
	if err != nil {
		return fmt.Errorf("ticksock: the holder behind FENCERUN_TICK is not there (has it exited?): %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// A refusal may come before the request is read: look for the answer
	// even when the write fails.
	_, werr := conn.Write([]byte("tick\n"))
	line, err := readLine(conn, maxAnswer)
	if err != nil {
		if werr != nil {
			return fmt.Errorf("ticksock: tick: %w", werr)
		}
		return fmt.Errorf("ticksock: tick: no answer from the holder: %w", err)
	}
	line = strings.TrimSpace(line)
	if line != "ok" {
		return fmt.Errorf("%w: %s", ErrRefused, strings.TrimPrefix(line, "refused: "))
	}
	return nil
}
