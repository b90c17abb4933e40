package statefs

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procLocks is the kernel's table of file locks; tests do not replace it.
const procLocks = "/proc/locks"

// FlockHolder reads /proc/locks for an exclusive flock(2) granted on the
// file open as fd, and returns the pid the kernel shows for it, or 0 if
// it shows none. Reading the table takes no lock, so, unlike ProbeFD, it
// never makes anyone's LOCK_NB attempt fail. The table is not the whole
// truth: the kernel leaves out locks whose owner is not visible in the
// pid namespace of this /proc, and names a file by its real inode's
// device, which on an overlay whose upper layer is another file system is
// not the st_dev fstat gives; a lock whose taker has exited
// while another process keeps the descriptor is shown with the dead
// taker's pid. So 0 means "none that this process can see", a pid need
// not be the process that holds the lock now, and callers that need
// certainty use a lock.
func FlockHolder(fd int) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	f, err := os.Open(procLocks)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pid, ok := flockLine(sc.Text(), st); ok {
			return pid, nil
		}
	}
	return 0, sc.Err()
}

// flockLine reports whether line of /proc/locks is a granted exclusive
// flock on the file st describes, and its pid. The format
// (fs/locks.c, lock_get_status): "N: FLOCK  ADVISORY  WRITE PID
// MAJ:MIN:INO 0 EOF", the device numbers in hex; a waiter's line has
// "->" after the number.
func flockLine(line string, st unix.Stat_t) (int, bool) {
	f := strings.Fields(line)
	if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
		return 0, false // a waiter ("->"), another kind of lock, or shared
	}
	id := strings.Split(f[5], ":")
	if len(id) != 3 {
		return 0, false
	}
	maj, err1 := strconv.ParseUint(id[0], 16, 32)
	mnr, err2 := strconv.ParseUint(id[1], 16, 32)
	ino, err3 := strconv.ParseUint(id[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil ||
		uint32(maj) != unix.Major(st.Dev) || uint32(mnr) != unix.Minor(st.Dev) || ino != st.Ino {
		return 0, false
	}
	pid, err := strconv.Atoi(f[4])
	return pid, err == nil && pid > 0
}
