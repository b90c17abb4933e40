package testsupport

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NotifyManager is a service manager's notify socket as systemd binds it
// (sd_notify(3)): datagrams, SO_PASSCRED, and each message's sender known
// by the pid the kernel stamped on it (SCM_CREDENTIALS), which
// NotifyAccess=main compares with the unit's main pid.
type NotifyManager struct {
	Addr string
	c    *net.UnixConn
}

// ListenNotify binds addr (a path, or @name in the abstract namespace);
// the test's cleanup closes it.
func ListenNotify(t testing.TB, addr string) *NotifyManager {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) })
	if serr != nil {
		t.Fatal(serr)
	}
	return &NotifyManager{Addr: addr, c: c}
}

// Next returns the next message and its sender's pid, failing the test
// after Guard or for a message without credentials.
func (m *NotifyManager) Next(t testing.TB) (string, int) {
	t.Helper()
	buf, oob := make([]byte, 8192), make([]byte, 256)
	m.c.SetReadDeadline(time.Now().Add(Guard))
	n, oobn, _, _, err := m.c.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatalf("no notify message: %v", err)
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for _, cm := range msgs {
		if cred, err := unix.ParseUnixCredentials(&cm); err == nil {
			return string(buf[:n]), int(cred.Pid)
		}
	}
	t.Fatalf("notify message %q came without credentials", buf[:n])
	return "", 0
}
