// Command sigrec records the signals it is sent, for the integration tests
// of signal forwarding: a shell cannot, because the background jobs of a
// non-interactive sh ignore SIGINT and SIGQUIT.
//
// Usage: sigrec FILE
//
// sigrec starts one child of itself in its own process group. Both catch
// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM,
// SIGVTALRM and SIGXCPU and append "<pid> <SIGNAL>" to FILE, one write a
// line (O_APPEND, so the lines of the two processes never mix). Each
// appends "<pid> ready" once its handlers are in place. On SIGINT,
// SIGTERM, SIGHUP or SIGQUIT each exits 0 after recording; the parent first
// waits for its child, so that a signal the child never gets keeps the
// parent running and the test sees it.
//
// It guarantees nothing about signals that arrive before "ready".
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

var names = map[os.Signal]string{
	syscall.SIGINT:    "INT",
	syscall.SIGTERM:   "TERM",
	syscall.SIGHUP:    "HUP",
	syscall.SIGQUIT:   "QUIT",
	syscall.SIGUSR1:   "USR1",
	syscall.SIGUSR2:   "USR2",
	syscall.SIGWINCH:  "WINCH",
	syscall.SIGALRM:   "ALRM",
	syscall.SIGVTALRM: "VTALRM",
	syscall.SIGXCPU:   "XCPU",
}

// terminating signals end both processes after they are recorded.
var terminating = map[os.Signal]bool{
	syscall.SIGINT: true, syscall.SIGTERM: true, syscall.SIGHUP: true, syscall.SIGQUIT: true,
}

func main() {
	args := os.Args[1:]
	child := len(args) == 2 && args[0] == "-child"
	if child {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sigrec FILE")
		os.Exit(2)
	}
	out, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sigrec:", err)
		os.Exit(2)
	}
	record := func(what string) {
		if _, err := fmt.Fprintf(out, "%d %s\n", os.Getpid(), what); err != nil {
			fmt.Fprintln(os.Stderr, "sigrec:", err)
			os.Exit(2)
		}
	}

	sigs := make(chan os.Signal, 16)
	for s := range names {
		signal.Notify(sigs, s)
	}

	var kid *exec.Cmd
	if !child {
		// Same process group: exec.Cmd does not set Setpgid by default.
		kid = exec.Command(os.Args[0], "-child", args[0])
		kid.Stdout, kid.Stderr = os.Stdout, os.Stderr
		if err := kid.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "sigrec:", err)
			os.Exit(2)
		}
	}
	record("ready")

	for s := range sigs {
		record(names[s])
		if terminating[s] {
			if kid != nil {
				_ = kid.Wait()
			}
			os.Exit(0)
		}
	}
}
