package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Stale tells a socket file nothing is bound to (its socket closed, as a
// SIGKILLed process's is) from a live one of either type, and never takes
// anything but a socket file; a live stream socket is never connected to,
// so its backlog stays empty. The directory's path is long enough that
// sun_path cannot hold it, as a deep state root's.
func TestStale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	ln, err := ListenStream(dirfd, dir, "stream", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pc, err := ListenPacket(dirfd, dir, "packet", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	deadS, err := ListenStream(dirfd, dir, "dead-stream", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	deadS.Close()
	deadP, err := ListenPacket(dirfd, dir, "dead-packet", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	deadP.Close()
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o600)
	for name, want := range map[string]bool{"stream": false, "packet": false, "dead-stream": true, "dead-packet": true, "file": false, "missing": false} {
		if got := Stale(dirfd, dir, name); got != want {
			t.Errorf("Stale(%s) = %v, want %v", name, got, want)
		}
	}
	raw, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	acceptErr := os.ErrInvalid
	raw.Control(func(fd uintptr) { // one try: the listener's fd is non-blocking
		var nfd int
		if nfd, _, acceptErr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC); acceptErr == nil {
			unix.Close(nfd)
		}
	})
	if acceptErr != unix.EAGAIN {
		t.Errorf("accept after the probes: %v, want EAGAIN (nothing in the backlog)", acceptErr)
	}
	for name, want := range map[string]bool{"stream": false, "dead-stream": true, "dead-packet": true} {
		if got := RemoveStale(dirfd, dir, name); got != want {
			t.Errorf("RemoveStale(%s) = %v, want %v", name, got, want)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) != want {
			t.Errorf("%s after RemoveStale: %v", name, err)
		}
	}
	// Bound under a temporary name and renamed: nothing of that name is
	// left, and a name in use is refused as bind refuses it.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), bindPrefix) {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	if _, err := ListenStream(dirfd, dir, "stream", 0o600); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("ListenStream over a live socket's name: %v, want address already in use", err)
	}
}

// A socket left under its temporary name by a process killed between the
// bind and the rename is taken for junk only once it is older than
// BindAge and nothing is bound to it: never a live one, never a fresh one
// (a bind in progress), never a file that is no socket or has a name of
// its own.
func TestLeftInBind(t *testing.T) {
	dir := t.TempDir()
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	bind := func(name string) *net.UnixListener {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		return ln
	}
	bind(BindPrefix + "dead").Close()
	bind("dead").Close()
	live := bind(BindPrefix + "live")
	defer live.Close()
	os.WriteFile(filepath.Join(dir, BindPrefix+"file"), nil, 0o600)
	if LeftInBind(dirfd, dir, BindPrefix+"dead") {
		t.Errorf("LeftInBind took a socket file younger than BindAge (%v)", BindAge)
	}
	defer func(age time.Duration) { BindAge = age }(BindAge)
	BindAge = 0
	for name, want := range map[string]bool{BindPrefix + "dead": true, BindPrefix + "live": false, BindPrefix + "file": false,
		"dead": false, BindPrefix + "missing": false, BindPrefix: false} {
		if got := LeftInBind(dirfd, dir, name); got != want {
			t.Errorf("LeftInBind(%s) = %v, want %v", name, got, want)
		}
	}
}
