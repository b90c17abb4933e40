package statefs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// FlockHolder finds a granted exclusive flock in the kernel's table, and
// nothing for a shared one or none.
func TestFlockHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() int {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	locker, reader := open(), open()
	holder := func() int {
		t.Helper()
		pid, err := FlockHolder(reader)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	if pid := holder(); pid != 0 {
		t.Errorf("unlocked: holder %d, want 0", pid)
	}
	if err := unix.Flock(locker, unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if pid := holder(); pid != 0 {
		t.Errorf("shared lock: holder %d, want 0", pid)
	}
	if err := unix.Flock(locker, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if pid := holder(); pid != os.Getpid() {
		t.Errorf("exclusive lock: holder %d, want this process, %d", pid, os.Getpid())
	}
	// Reading the table took no lock: the holder's lock is untouched and a
	// LOCK_NB attempt elsewhere still fails as it should.
	if err := unix.Flock(reader, unix.LOCK_SH|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Errorf("LOCK_SH|LOCK_NB beside the exclusive lock: %v, want EWOULDBLOCK", err)
	}
}

// A waiter's line ("->") and other files' locks are not the holder.
func TestFlockLine(t *testing.T) {
	st := unix.Stat_t{Dev: unix.Mkdev(0xfe, 0), Ino: 10478405}
	for line, want := range map[string]int{
		"7: FLOCK  ADVISORY  WRITE 4154781 fe:00:10478405 0 EOF":    4154781,
		"7: -> FLOCK  ADVISORY  WRITE 4154782 fe:00:10478405 0 EOF": 0,
		"7: FLOCK  ADVISORY  READ  4154781 fe:00:10478405 0 EOF":    0,
		"7: FLOCK  ADVISORY  WRITE 4154781 fe:01:10478405 0 EOF":    0,
		"7: FLOCK  ADVISORY  WRITE 4154781 fe:00:10478406 0 EOF":    0,
		"1: OFDLCK ADVISORY  WRITE -1 fe:00:10478405 0 EOF":         0,
		"2: POSIX  ADVISORY  WRITE 4154781 fe:00:10478405 0 EOF":    0,
		"garbage": 0,
	} {
		if pid, _ := flockLine(line, st); pid != want {
			t.Errorf("%q: pid %d, want %d", line, pid, want)
		}
	}
}
