//go:build linux

// Command fencerun runs a command only while it holds a lease, and stops the
// command's whole process tree the moment the lease is lost. The command
// line is package cmd/internal/cli; this binary carries the file backend and
// execs fencerun-etcd (cmd/fencerun-etcd) for --etcd, so that it never
// links the etcd client.
//
// fencerun has no use for a GOMAXPROCS that follows cgroup limits: without
// the setting below the runtime re-reads them every second, which is a
// fair share of what holding a lease costs (P4).
//
//go:debug updatemaxprocs=0
package main

import (
	"os"

	// First: its init execs fencerun-etcd for --etcd, before the other
	// packages initialise; Err is why it could not.
	"github.com/fencerun/fencerun/cmd/fencerun/hop"
	"github.com/fencerun/fencerun/cmd/internal/cli"
)

func main() {
	code := cli.Main(os.Args[1:], cli.Etcd{HopFailed: hop.Err})
	os.Exit(code)
}
