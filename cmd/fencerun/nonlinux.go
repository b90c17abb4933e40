//go:build !linux

package main

// fencerun needs Linux: flock and open file description locks, pidfds,
// PR_SET_CHILD_SUBREAPER, cgroup v2 and /proc are what its guarantees are
// made of. On any other GOOS this file alone is the package, so the build
// stops here, with this one message, before any package that needs Linux.
var _ int = "fencerun needs Linux: build with GOOS=linux"
