// Package supervisor runs the fenced command and stops its whole process
// tree.
//
// Start runs the command in a process group of its own, and makes the
// calling process a child subreaper, so that descendants that leave the
// group (setsid, double fork) are reparented to it rather than to init.
// The command gets fds 0, 1 and 2 untouched and every descriptor from 3 on
// that this process's parent passed it open (not close-on-exec when this
// package was initialised), each at its own number; none of this
// process's own. Under systemd socket activation, when LISTEN_PID names
// this process, the command is started through an exec trampoline so that
// LISTEN_PID names the command (see activation_linux.go).
//
// With Config.Cgroup (a path below the Hierarchy FindHierarchy found), the
// command is started directly into a cgroup v2 of its own (clone3 with
// CLONE_INTO_CGROUP: not one instruction runs outside it), and the tree is
// exactly the cgroup and the cgroups below it: stopping ends with
// cgroup.kill, which no fork can outrun, and the tree is gone when
// cgroup.events says "populated 0" (woken by poll(2) on that file and on
// pidfds of its members, not by reading /proc). The cgroup is removed once
// empty. Start makes it, once the caller holds the lease it is recorded
// in, just before the command starts: a run that waits or dies before its
// start leaves no cgroup, and one whose wrapper dies later leaves it named
// in its lease's record, for the next holder's StopTrees. The tree is the
// cgroup alone: a process that root moves out of it (systemd-run --scope,
// a container runtime) is no longer the command's, and no /proc is read to
// find one.
//
// Signals: Catch is this process's one signal subscription, for good: the
// caller's, SIGCHLD, SIGPIPE (dropped) and the job signals, which go to the
// running command's Process, or with none stop this process as by default.
//
// Without one, the command's tree is found among the descendants of this
// process: the command's process group; the processes reparented to this
// process after the command started (see below); every descendant carrying
// the run's Marker in its environment; and everything below any of those.
// Stopping it freezes it before SIGKILL (SIGSTOP to every member, read
// again until only stopped members are found, twice alike), and it counts
// as gone only after two readings in a row find nothing and no orphan was
// reparented here in between: a process that forks in a loop cannot slip
// between two readings.
//
// StopTrees, for runs whose wrapper died, stops each store.Leftover: its
// cgroup where it had one (exact), else every process of the host carrying
// its marker (checked to have the form package ticksock gives out), in its
// process group or in its session (each id checked against the leader's
// start time, so a reused id is never signalled), and their descendants.
// A record directs signals only where the tree proves it is the record's
// (S9): a cgroup bound to its marker (treeXattr), the dead holder's own
// session, a group with a process carrying the marker or in that session.
// The recorded group is signalled as a whole (frozen by SIGSTOP before
// SIGKILL), and is gone only when the kernel finds no process in it. It
// never acts on another host's leftovers.
//
// A process is gone when its whole thread group is: a leader whose own
// thread ended (pthread_exit in main) reads Z while its other threads run.
//
// It guarantees:
//
//   - Wait returns only when the direct child has exited and every other
//     process of the tree is gone; leftovers of a command that exited by
//     itself are stopped first (stop signal, SIGCONT, grace, SIGKILL). The
//     processes it reparented are reaped, by pid, never by wait(-1): other
//     children of the program are left to whoever started them (except in
//     a pid namespace without its own /proc, below).
//   - Stop sends the stop signal, then SIGCONT, to every process of the
//     tree, and SIGKILL to whatever of it is left at the end of the grace,
//     measured on Config.Clock (CLOCK_BOOTTIME: a suspend counts).
//     Processes forked after the stop signal (a trap's cleanup) are left to
//     finish until then.
//   - The direct child has Pdeathsig SIGKILL, set from an OS thread that
//     lives until the child is reaped (go.dev/issue/27505): if this process
//     is SIGKILLed, the command dies at once. A command whose program is
//     set-user-ID, set-group-ID or has file capabilities (its exec clears
//     Pdeathsig) gets a watcher instead (deathwatch_linux.go); one that
//     execs such a program later (sh -c 'exec sudo ...') does not, and
//     outlives this process's SIGKILL until the next holder stops it.
//   - Under a terminal, when this process is in the foreground, the
//     command's group is made the foreground group (so Ctrl-C reaches it and
//     it is never stopped by SIGTTIN or SIGTTOU) and the foreground is given
//     back at the end of Wait. In the background it grabs nothing.
//   - Job control (Process.JobControl): the command and this process stop
//     and continue as one job of the shell, and a stopped command runs
//     again only once the lease is confirmed; a signal forwarded to a
//     stopped command is followed by SIGCONT. Without a terminal this
//     process never stops itself.
//   - Waiting is done by the kernel: waitid on the direct child, SIGCHLD,
//     poll on pidfds or on the cgroup's events, and a timerfd for the
//     grace. Nothing polls on a timer (unless pidfds cannot be had). The
//     tree is read from /proc by Signal and Owns, and while stopping
//     without a cgroup only at the start, when the processes it knew are
//     all gone, and when the grace ends.
//   - In a pid namespace whose /proc is another namespace's (unshare --pid
//     --fork without --mount-proc), /proc is never read for the tree: as
//     the namespace's init the tree is the whole namespace (kill(-1), and
//     wait4(-1) until no child is left); otherwise the process group and
//     the cgroup, if any. See pidns_linux.go.
//
// It does not guarantee:
//
//   - that a process is found that is not below this one (without a
//     cgroup) or not in the cgroup: started on the command's request by a
//     daemon outside the tree (systemd-run, at, docker);
//   - without a cgroup, that StopTrees finds a leftover that left the
//     command's process group (and the wrapper's session, if it led one)
//     and cleared or rewrote its environment, and was reparented to init
//     when its wrapper died; a cgroup finds it; nor, without a cgroup, a
//     dead holder's process that forks and exits in a loop outside the
//     recorded group (after setsid): it may be gone from every reading;
//   - that a dead holder's recorded group is stopped whole when none of
//     its processes carries the marker and the holder led no session
//     (every one cleared its environment): only its marked ones are;
//   - that processes running as another user (sudo -u, su) can be stopped
//     by a wrapper that is not root without a cgroup: their environment
//     cannot be read and signals to them fail; Stop logs them and does not
//     wait for them, and StopTrees returns an error naming them;
//   - that a job stop reaches processes of the tree outside the command's
//     group before this process stops (they are sent SIGSTOP just before),
//     or that a command which ignores SIGTSTP sent to this process stops:
//     then this process does not stop either;
//   - the caller's dispositions and mask beyond what the Go runtime leaves
//     (CallerIgnored; README: what the command is given).
//
// Reparented processes are ambiguous: a child of this process that no
// Process started, that is outside this process's own process group and
// that started after a running command, is counted as that command's (a
// daemon that double-forked and cleared its environment still has to be
// stopped). A program that starts other children of its own in a process
// group of their own while a Process runs must expect them to be counted
// too. Children that inherit the program's process group, as os/exec
// starts them by default, never are.
package supervisor
