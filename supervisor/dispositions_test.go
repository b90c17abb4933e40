package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// untouchedMask is untouched as a SigIgn mask.
func untouchedMask() uint64 {
	var m uint64
	for _, s := range untouched {
		m |= 1 << (uint(s) - 1)
	}
	return m
}

// The signals read as ignored at init, asked of the kernel one at a time,
// are SigIgn of /proc/self/status on the signals the Go runtime leaves
// alone (every other ignored one it takes over before init): in a process
// started with SIGHUP, SIGINT, SIGTTOU and SIGUSR1 ignored, and in this
// one. Of those, the runtime takes SIGUSR1 over (it is lost), and leaves
// the other three ignored.
func TestSigIgnAsStatusShowsIt(t *testing.T) {
	if got, want := readSigIgn(), readStatusSigIgn()&untouchedMask(); got != want {
		t.Fatalf("here: rt_sigaction's ignored signals %#x, /proc/self/status's SigIgn %#x", got, want)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `trap "" HUP INT TTOU USR1; exec "$0" sigign`, exe)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var atInit, status uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "%x %x", &atInit, &status); err != nil {
		t.Fatalf("helper said %q: %v", out, err)
	}
	if atInit != status&untouchedMask() {
		t.Errorf("helper: at init %#x, SigIgn %#x", atInit, status)
	}
	bit := func(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }
	if want := bit(syscall.SIGHUP) | bit(syscall.SIGINT) | bit(syscall.SIGTTOU); atInit&want != want || atInit&bit(syscall.SIGUSR1) != 0 {
		t.Errorf("helper: ignored at init %#x; want SIGHUP, SIGINT and SIGTTOU in it and not SIGUSR1", atInit)
	}
}
