// Package supervisor starts one command and stops its whole process tree:
// while this process lives (Process), or after its wrapper died
// (StopTrees, for a store.Leftover).
//
// The command runs in a process group of its own, with this process as its
// child subreaper, so that descendants that leave the group reparent here.
// With Config.Cgroup it starts straight into a cgroup v2 of its own, made
// once the caller holds the lease that records it, and the tree is exactly
// that cgroup (cgroup_linux.go). Without one, the tree is read from /proc:
// the group, the orphans reparented here, every process carrying the run's
// Marker, and their descendants (sweep_linux.go; in a pid namespace
// without its own /proc, pidns_linux.go). Catch is this process's one
// signal subscription (signals_linux.go).
//
// It guarantees:
//
//   - S2: Wait returns only once the direct child has exited and every
//     other process of the tree is gone, leftovers of a command that exited
//     by itself stopped first. Stop sends the stop signal, SIGCONT, and
//     SIGKILL at the end of the grace, on Config.Clock (CLOCK_BOOTTIME, S3).
//     The direct child dies with this process (Pdeathsig, or for a set-id
//     program or script a watcher: deathwatch_linux.go).
//   - S2, S9: StopTrees stops a dead holder's tree as Stop would, on this
//     host only, signalling only what proves it the record's (a cgroup
//     bound to its marker, the holder's session, a group with a marked
//     process), never a reused pid, and removes such a cgroup once empty
//     (leftovers_linux.go); Remain says whether a tree left either.
//   - S7: under a terminal the command's group has the foreground, given
//     back at the end; job control makes the command and this process one
//     job, and a stopped command runs again only once the lease is
//     confirmed (jobcontrol_linux.go). The command gets fds 0-2, what the
//     caller passed open, and its sockets under socket activation.
//   - Waiting is the kernel's (waitid, pidfds, cgroup.events, a timerfd):
//     nothing polls on a timer while pidfds can be had.
//
// It does not guarantee:
//
//   - without a cgroup, finding a process that left the tree's group and
//     session, cleared its environment and was reparented to init when its
//     wrapper died, nor, ever, one a daemon started (systemd-run, at);
//   - stopping another user's processes without root and a cgroup: Stop
//     logs them, StopTrees returns an error naming them;
//   - that a program using it may start children of its own while a
//     Process runs: one that started after the command is counted as the
//     command's (Process.adopts);
//   - the caller's signal dispositions beyond what Go leaves (CallerIgnored).
package supervisor
