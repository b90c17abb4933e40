// Command activated is a socket-activated service for the integration
// tests of systemd socket activation: it checks that LISTEN_PID names it,
// that LISTEN_FDS is 1 and LISTEN_FDNAMES is the name it is given, accepts
// one connection on fd 3 and writes "hello from PID" to it.
//
// Usage: activated NAME
//
// It exits 0 once it has answered, and 3 after saying on stderr what was
// wrong.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: activated NAME")
		os.Exit(2)
	}
	if err := serve(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "activated:", err)
		os.Exit(3)
	}
}

func serve(name string) error {
	pid := strconv.Itoa(os.Getpid())
	if got := os.Getenv("LISTEN_PID"); got != pid {
		return fmt.Errorf("LISTEN_PID is %q, not my pid %s", got, pid)
	}
	if got := os.Getenv("LISTEN_FDS"); got != "1" {
		return fmt.Errorf("LISTEN_FDS is %q, want 1", got)
	}
	if got := os.Getenv("LISTEN_FDNAMES"); got != name {
		return fmt.Errorf("LISTEN_FDNAMES is %q, want %q", got, name)
	}
	ln, err := net.FileListener(os.NewFile(3, name))
	if err != nil {
		return fmt.Errorf("fd 3: %w", err)
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = fmt.Fprintf(c, "hello from %s\n", pid)
	return err
}
