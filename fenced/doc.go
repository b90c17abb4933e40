// Package fenced runs one command under one lease: it takes the lease
// (through the caller's Acquire), stops what dead predecessors left
// running, starts the command, keeps the lease while the command runs,
// stops the command's whole tree when it must, releases, and says how the
// run ended as a typed Outcome. Mapping an Outcome to an exit code is the
// caller's (cmd/internal/cli/exit.go), and so are flags, the store and the
// messages that describe a holder.
//
// A run is one oklog/run group of small actors (actors.go), each an
// execute/interrupt pair that talks to the others through channels:
//
//   - command: stops the predecessors' leftovers, starts the command unless
//     something asked to stop it first, and applies every stop request
//     (with the earliest deadline any of them carried) until the tree is
//     gone;
//   - keeper: fence.Keeper, renewing and watching the lease; a broken fence
//     sends the command a stop with the deadline by which its tree must be
//     dead;
//   - requests: a cancel or handover request ends the group gracefully;
//   - signals: forwards the signals of S7 to the running command's group
//     (before the start the command actor owns them: a signal caught
//     before the command starts means it never does);
//   - watchdog: --stuck-after (R7);
//   - ticks: `fencerun tick` from the command's tree, stamped by the keeper
//     and fed to the watchdog;
//   - timeout: --timeout, counted from the command's start on the injected
//     clock;
//   - notifier: systemd's notify protocol (N1, Config.Notify): READY=1 and
//     the lease in STATUS once the command started (or, with a relay,
//     READY=1 when the command says it: what the command's tree sends is
//     relayed from fencerun's pid, MAINPID never, and a message from any
//     other process dropped); the watchdog fed only while the renewal due
//     is at most half a watchdog interval late (with a relay, only as the
//     command feeds it); STATUS with the reason and STOPPING=1 when the run
//     stops the command (a lost lease says "lease lost"). A keeper that
//     loses the lease after another actor began the stop is not told
//     again: the STOPPING=1 went already.
//
// When one actor ends, the others are interrupted; the keeper, the signals
// and the ticks go on until the command's tree is gone, so that a fence
// that breaks while the command is being stopped still cuts its grace
// short, and a command that is stopping may still tick and get signals.
//
// What it keeps, of the contract's safety properties (docs/CONTRACT.md):
//
//   - S1: the command starts only once the lease is held, and only after
//     the leftovers of dead predecessors are gone (they are stopped to the
//     end, whatever happens meanwhile: they are not ours to abandon). The
//     exclusion itself is the store's, the tree the supervisor's. What
//     Config.Prepare makes ready beside the acquisition (the command's
//     cgroup) runs nothing, and is discarded on every path that does not
//     start the command.
//   - S2: the lease is released only after the command's whole tree is
//     gone (supervisor.Process.Wait), on every path; leftovers not
//     confirmed gone stay with the lease for the next holder.
//   - S3: a broken fence (revoked, taken over, or renewals failing) stops
//     the tree with a grace capped so that it is dead before the keeper's
//     StopBy, on the injected clock (CLOCK_BOOTTIME by default), also when
//     the command was already being stopped for another reason.
//   - S5: a revocation the keeper sees ends the run as FenceBroken, even
//     when another actor ended the group first.
//   - S7: a signal while the lease is being taken ends the wait and starts
//     no command (a lease taken at that very moment is given back, after
//     its predecessors' leftovers are stopped); a signal after the lease
//     is held but before the command started does the same; once the
//     command runs, the signals are forwarded to its tree and the command
//     decides. SIGWINCH never ends a wait. A Fatal signal (SIGABRT,
//     SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGSTKFLT sent
//     with kill) is never forwarded: while the command runs it stops the
//     tree (stop signal, SIGCONT, grace, SIGKILL) and the run ends Killed,
//     whatever the command's own status; before, it ends the wait as any
//     signal.
//   - O1: with Config.Once, only a command that exited 0 by itself under
//     the lease marks the ID done, with the release (ReleaseDone); a
//     lease lost before the mark is a broken fence (76) and marks
//     nothing; every other end (failed, signalled, timed out, cancelled,
//     stuck, revoked) releases without a mark.
//   - S8: every path that held the lease releases it, within min(TTL, 10s):
//     a store that hangs cannot keep fencerun from exiting (the kernel lock
//     that proves the holder alive goes with the process anyway).
//
// What it does not guarantee: that a command which ignores its stop signal
// dies before its deadline unless SIGKILL reaches it in time (the
// supervisor's job, on the clock the caller gives it); that a store keeps
// its promises (package store); that processes which left the command's
// tree are found (package supervisor says which are). A signal the kernel
// delivers while the command is being started (after the last look at the
// caught signals, before the fork returns) is forwarded to the command
// rather than ending the run: the two cannot be told apart. How long to
// wait for the lease is the caller's Acquire's to bound (--wait), and so is
// what a busy lease means.
package fenced
