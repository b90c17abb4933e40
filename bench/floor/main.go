// Command floor is the least a Go lease wrapper on the file backend does,
// built by the benchmark harness (../) and measured beside fencerun and
// flock(1) as a floor, not as a peer: `floor DIR KEY [TTL] -- CMD ...`
// takes an exclusive flock on DIR/KEY.lock (waiting for it as flock(1)
// does), starts CMD with os/exec, waits for it and exits with its status.
// With a TTL it also renews once every TTL/3 on a CLOCK_BOOTTIME timerfd
// in the runtime's poller, doing a renewal's file work as fencerun's file
// backend does it (docs/DESIGN.md, fifth pass): under a guard's flock,
// stat the key directory's path and the three names in it, pread the 8 KiB
// two-slot record and pwrite one slot of about 500 bytes.
//
// What it leaves out is what the table's ratio against it is made of: the
// command line (kong), a second lock and queue for FIFO order, fences, the
// record's checksums and encoding, the lease's deadline, signals forwarded
// to the command, the tick and claim sockets, the cgroup and the process
// tree's containment, status and revocation. So it is the floor of a Go
// program that holds a lock and supervises a command here: the Go runtime's
// start and exit, its scheduler and sysmon around each renewal, the system
// calls. It guarantees nothing of fencerun's contract; it is not exclusive
// against fencerun (another file).
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

var errUsage = fmt.Errorf("usage: floor DIR KEY [TTL] -- CMD [ARG]")

func main() {
	if len(os.Args) < 5 {
		fail(errUsage)
	}
	dir, key := os.Args[1], os.Args[2]
	rest := os.Args[3:]
	var ttl time.Duration
	if rest[0] != "--" {
		d, err := time.ParseDuration(rest[0])
		if err != nil {
			fail(err)
		}
		ttl, rest = d, rest[1:]
	}
	if len(rest) < 2 || rest[0] != "--" {
		fail(errUsage)
	}
	argv := rest[1:]

	lock, err := unix.Open(filepath.Join(dir, key+".lock"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		fail(err)
	}
	if err := unix.Flock(lock, unix.LOCK_EX); err != nil {
		fail(err)
	}
	var r *renewal
	if ttl > 0 {
		if r, err = newRenewal(dir, key); err != nil {
			fail(err)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	if r == nil {
		exit(cmd.Wait(), cmd)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ticks, err := bootTicker(ttl / 3)
	if err != nil {
		fail(err)
	}
	for {
		select {
		case err := <-done:
			exit(err, cmd)
		case <-ticks:
			if err := r.renew(); err != nil {
				fail(err)
			}
		}
	}
}

// renewal is the files a renewal works on, kept open from the start.
type renewal struct {
	keyDir       string
	dirFD, guard int
	record       int
	buf, slot    []byte
	seq          int
}

func newRenewal(dir, key string) (*renewal, error) {
	r := &renewal{keyDir: filepath.Join(dir, "keys", "k-"+key), buf: make([]byte, 8192), slot: make([]byte, 494)}
	if err := os.MkdirAll(r.keyDir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if r.dirFD, err = unix.Open(r.keyDir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		fd   *int
	}{{"guard", &r.guard}, {"live", new(int)}, {"lease", &r.record}} {
		if *f.fd, err = unix.Openat(r.dirFD, f.name, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600); err != nil {
			return nil, err
		}
	}
	_, err = unix.Pwrite(r.record, r.buf, 0)
	return r, err
}

// renew is one renewal's file work: the guard, the four stats, the record
// read whole and one slot written, the guard let go.
func (r *renewal) renew() error {
	var ts unix.Timespec
	var st unix.Stat_t
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return err
	}
	if err := unix.Flock(r.guard, unix.LOCK_EX); err != nil {
		return err
	}
	if err := unix.Fstatat(unix.AT_FDCWD, r.keyDir, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	for _, name := range []string{"live", "guard", "lease"} {
		if err := unix.Fstatat(r.dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if _, err := unix.Pread(r.record, r.buf, 0); err != nil {
		return err
	}
	r.seq++
	if _, err := unix.Pwrite(r.record, r.slot, int64(r.seq%2)*4096); err != nil {
		return err
	}
	if err := unix.Flock(r.guard, unix.LOCK_UN); err != nil {
		return err
	}
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
}

// bootTicker fires every d on CLOCK_BOOTTIME, read through the runtime's
// poller as fencerun's keeper reads its timer.
func bootTicker(d time.Duration) (<-chan struct{}, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	every := unix.NsecToTimespec(d.Nanoseconds())
	if err := unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Interval: every, Value: every}, nil); err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	c := make(chan struct{})
	go func() {
		b := make([]byte, 8)
		for {
			if _, err := f.Read(b); err != nil {
				return
			}
			c <- struct{}{}
		}
	}()
	return c, nil
}

func exit(err error, cmd *exec.Cmd) {
	if err != nil && cmd.ProcessState == nil {
		fail(err)
	}
	os.Exit(cmd.ProcessState.ExitCode())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "floor:", err)
	os.Exit(125)
}
