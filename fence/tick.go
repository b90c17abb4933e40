package fence

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// ErrTickRefused: the holder would not take the tick, because the caller is
// not a process of the command it runs.
var ErrTickRefused = errors.New("fence: tick refused")

// TickServer is the holder's end of `fencerun tick`: an abstract unix socket
// with an unguessable name, given to the command as FENCERUN_TICK. A tick is
// taken only from a peer (by SO_PEERCRED) that is a process of the command's
// tree, so nothing outside the command can make a wedged holder look alive
// (R6). The holder then stamps the tick itself: only the holding process
// writes its record.
type TickServer struct {
	ln   *net.UnixListener
	addr string
	log  hclog.Logger
}

// ListenTicks opens the socket. Connections wait in its backlog until Serve.
func ListenTicks(log hclog.Logger) (*TickServer, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("fence: tick socket name: %w", err)
	}
	addr := "@fencerun-tick-" + hex.EncodeToString(b[:])
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("fence: tick socket: %w", err)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &TickServer{ln: ln, addr: addr, log: log}, nil
}

// Addr is the value of FENCERUN_TICK.
func (s *TickServer) Addr() string { return s.addr }

// Serve answers ticks until Close: a peer for which owns(pid) is true gets
// onTick called and "ok"; any other is refused. It returns nil once closed.
// Anyone on the host can connect to the socket, so nothing a caller does
// ends Serve: accept errors (EMFILE, say) are logged and retried with a
// backoff, and at most maxCallers are answered at once, each for at most
// callerDeadline; a caller beyond that is hung up on.
func (s *TickServer) Serve(owns func(pid int) bool, onTick func(time.Time)) error {
	callers := make(chan struct{}, maxCallers)
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
		select {
		case callers <- struct{}{}:
			go func() {
				defer func() { <-callers }()
				s.answer(c, owns, onTick)
			}()
		default:
			c.Close()
		}
	}
}

const (
	maxCallers     = 16
	callerDeadline = 2 * time.Second
)

func (s *TickServer) answer(c *net.UnixConn, owns func(pid int) bool, onTick func(time.Time)) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(callerDeadline))
	// Read the request before answering: closing with it unread would
	// break the caller's write.
	req, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(req) != "tick" {
		return
	}
	pid, err := peerPID(c)
	reply := "ok"
	switch {
	case err != nil:
		reply = "refused: " + err.Error()
	case !owns(pid):
		reply = fmt.Sprintf("refused: pid %d is not a process of the command this holder runs", pid)
	default:
		onTick(time.Now())
	}
	if reply != "ok" {
		s.log.Warn("tick refused", "reason", reply)
	}
	_, _ = c.Write([]byte(reply + "\n"))
}

// Close stops Serve.
func (s *TickServer) Close() error { return s.ln.Close() }

func peerPID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, fmt.Errorf("peer credentials: %w", gerr)
	}
	return int(cred.Pid), nil
}

// SendTick is `fencerun tick`: it asks the holder behind addr (the value of
// FENCERUN_TICK) to stamp a liveness tick, and returns once the holder took
// it, or an error saying why not (ErrTickRefused when the holder refused).
func SendTick(ctx context.Context, addr string) error {
	if !strings.HasPrefix(addr, "@fencerun-tick-") {
		return fmt.Errorf("fence: FENCERUN_TICK=%q is not an address fencerun gave out", addr)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return fmt.Errorf("fence: the holder behind FENCERUN_TICK is not there (has it exited?): %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("tick\n")); err != nil {
		return fmt.Errorf("fence: tick: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("fence: tick: no answer from the holder: %w", err)
	}
	line = strings.TrimSpace(line)
	if line != "ok" {
		return fmt.Errorf("%w: %s", ErrTickRefused, strings.TrimPrefix(line, "refused: "))
	}
	return nil
}
