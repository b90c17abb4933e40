package sdnotify_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/sdnotify"
	"github.com/fencerun/fencerun/internal/testsupport"
)

// Send reaches a path socket and an abstract one (NOTIFY_SOCKET=@...), as
// one datagram stamped with this process's pid.
func TestSend(t *testing.T) {
	for _, addr := range []string{t.TempDir() + "/notify", fmt.Sprintf("@fencerun-sdnotify-test-%d", os.Getpid())} {
		m := testsupport.ListenNotify(t, addr)
		if err := sdnotify.Send(addr, "READY=1\nSTATUS=up"); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if s, pid := m.Next(t); s != "READY=1\nSTATUS=up" || pid != os.Getpid() {
			t.Fatalf("%s: got %q from pid %d, want it from %d", addr, s, pid, os.Getpid())
		}
	}
	if err := sdnotify.Send("vsock:2:1", "READY=1"); err == nil {
		t.Fatal("a vsock: address was taken")
	}
}

// A Listener returns each datagram with its sender's pid, drops one
// longer than MaxMessage whole, and closes the descriptors a datagram
// passed at the next Read: a sender waiting on BARRIER=1's pipe learns
// that what it sent before was read.
func TestListener(t *testing.T) {
	l, err := sdnotify.Listen(t.TempDir(), "n")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := sdnotify.Send(l.Addr(), strings.Repeat("x", sdnotify.MaxMessage+1)); err != nil {
		t.Fatal(err)
	}
	if err := sdnotify.Send(l.Addr(), "READY=1\n\nSTATUS=up\n"); err != nil {
		t.Fatal(err)
	}
	m, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	if m.PID != os.Getpid() || strings.Join(m.Fields(), ",") != "READY=1,STATUS=up" {
		t.Fatalf("read %+v (fields %q), want READY=1 and STATUS=up from pid %d; the long one dropped", m, m.Fields(), os.Getpid())
	}

	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Sendmsg(fd, []byte("BARRIER=1"), unix.UnixRights(p[1]), &unix.SockaddrUnix{Name: l.Addr()}, 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(p[1])
	if m, err := l.Read(); err != nil || m.State != "BARRIER=1" {
		t.Fatalf("read %+v, %v, want the barrier", m, err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Read(); done <- err }()
	// The barrier's pipe reads end of file once the Listener let go of it.
	unix.SetNonblock(p[0], false)
	if n, err := unix.Read(p[0], make([]byte, 1)); n != 0 || err != nil {
		t.Fatalf("barrier pipe read %d, %v, want end of file", n, err)
	}
	l.Close()
	if err := <-done; err == nil {
		t.Fatal("Read returned no error after Close")
	}
	if _, err := os.Stat(l.Addr()); !os.IsNotExist(err) {
		t.Fatalf("socket file left after Close: %v", err)
	}
}

func TestEnvAndWatchdog(t *testing.T) {
	env := []string{"A=1", "NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=1000000", "WATCHDOG_PID=1"}
	if got := strings.Join(sdnotify.Env(env, "", time.Second), " "); got != "A=1" {
		t.Errorf("Env without a relay = %q, want A=1 alone", got)
	}
	if got := strings.Join(sdnotify.Env(env, "/x/n", time.Second), " "); got != "A=1 NOTIFY_SOCKET=/x/n WATCHDOG_USEC=1000000" {
		t.Errorf("Env with a relay = %q", got)
	}
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"", "", 0}, {"2000000", "", 2 * time.Second}, {"2000000", fmt.Sprint(os.Getpid()), 2 * time.Second},
		{"2000000", "1", 0}, {"12x", "", 0}, {"-5", "", 0},
	} {
		env := map[string]string{"WATCHDOG_USEC": c.usec, "WATCHDOG_PID": c.pid}
		if got := sdnotify.Watchdog(func(k string) string { return env[k] }); got != c.want {
			t.Errorf("Watchdog(%q, pid %q) = %v, want %v", c.usec, c.pid, got, c.want)
		}
	}
}
