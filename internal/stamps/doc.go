// Package stamps times the steps of one fencerun process from inside it,
// for finding where its start-up and a handoff spend their time (issue 13;
// on etcd, issue 11: cmd/fencerun-etcd, cmd/fencerun/hop and store/etcdstore
// mark the exec hop, the dial, the transactions and the release).
//
// Mark records a named moment on CLOCK_MONOTONIC, the clock of the bench's
// stamp program (bench/stamp), so the marks line up with its stamps and
// with the marks of other processes, and the process's CPU time (all its
// threads) at that moment. Dump appends the marks, one "pid name monotonic
// cpu" line each, in nanoseconds, to the file $FENCERUN_STAMPS.
//
// It guarantees that a normal build does nothing at all: without the build
// tag fencerun_stamps both functions are empty, no environment variable is
// read and no clock is asked. Build with -tags fencerun_stamps to time a
// run; such a build is for measuring only. It does not guarantee complete
// marks: a process that dies by a signal, or exits by another path than
// main's, dumps nothing.
package stamps
