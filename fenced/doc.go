// Package fenced runs one command under one lease: it takes the lease
// through the caller's Acquire, stops what dead predecessors left running,
// starts the command, keeps the lease while it runs (with package fence,
// the lease keeper), stops the command's whole tree when it must, releases,
// and says how the run ended as a typed Outcome. Exit codes, flags, the
// store and the messages that describe a holder are the caller's
// (cmd/internal/cli).
//
// A run is one oklog/run group of small actors talking through channels
// (actors.go): the command, the keeper, cancel and handover requests,
// signals, the watchdog (R7), ticks, the timeout, and systemd's notify
// protocol (N1, notify.go). When one ends the others are interrupted; the
// keeper, signals and ticks go on until the tree is gone, so that a fence
// that breaks during a stop still cuts its grace short.
//
// It guarantees:
//
//   - S1: the command starts only once the lease is held and the leftovers
//     of dead predecessors are gone (stopped to the end, whatever happens
//     meanwhile). The exclusion is the store's, the tree the supervisor's;
//     the caller's Start makes the command's cgroup, under the lease.
//   - S2, S8: the lease is released only after the command's whole tree is
//     gone, on every path; leftovers not confirmed gone stay with the lease
//     for the next holder. A release that hangs is given up after
//     min(TTL, 10s).
//   - S3, S5: a broken fence (revoked, taken over, renewals failing) stops
//     the tree with a grace cut so that it is dead before the keeper's
//     StopBy, also when it was being stopped already, and the run ends
//     FenceBroken, whichever actor ended the group first.
//   - S7: a signal before the command starts ends the run and starts
//     nothing (a lease just taken is given back, after the leftovers are
//     stopped); once the command runs, signals are forwarded and the
//     command decides. A Fatal signal is never forwarded: it stops the
//     tree and the run ends Killed. SIGWINCH never ends a wait.
//   - O1: only a command that exited 0 by itself under the lease marks the
//     Once ID done, with the release; a lease lost first is a broken fence
//     and marks nothing.
//
// It does not guarantee that a command ignoring its stop signal dies in
// time unless SIGKILL reaches it (the supervisor's job), that a store keeps
// its promises (package store), or that processes which left the tree are
// found (package supervisor says which are). How long to wait for the
// lease, and what a busy one means, is the caller's Acquire's to decide.
package fenced
