// Package supervisor runs the fenced command and stops its whole process
// tree.
//
// Start runs the command in a process group of its own, with fds 0, 1 and 2
// inherited untouched (every other descriptor is close-on-exec), and makes
// the calling process a child subreaper, so that descendants that leave the
// group (setsid, double fork) are reparented to it rather than to init.
//
// The command's tree is found among the descendants of this process: the
// command's process group; the processes reparented to this process after
// the command started (see below); every descendant carrying the run's
// Marker in its environment; and everything below any of those.
// Process.Stop, Process.Wait and Process.Signal act on the tree as it is at
// each moment. StopLeftovers, for a run whose wrapper died, reads the whole
// of /proc instead: every process carrying the marker, and its descendants.
//
// It guarantees:
//
//   - Wait returns only when the direct child has exited and every other
//     process of the tree is gone; leftovers of a command that exited by
//     itself are stopped first (stop signal, SIGCONT, grace, SIGKILL). The
//     processes it reparented are reaped, by pid, never by wait(-1): other
//     children of the program are left to whoever started them.
//   - Stop sends the stop signal, then SIGCONT, to every process of the
//     tree, and SIGKILL to whatever of it is left at the end of the grace,
//     measured on CLOCK_BOOTTIME (a suspend counts). Processes forked after
//     the stop signal (a trap's cleanup) are left to finish until then.
//   - The direct child has Pdeathsig SIGKILL, set from an OS thread that
//     lives until the child is reaped (go.dev/issue/27505): if this process
//     is SIGKILLed, the command dies at once.
//   - Under a terminal, when this process is in the foreground, the
//     command's group is made the foreground group (so Ctrl-C reaches it and
//     it is never stopped by SIGTTIN or SIGTTOU) and the foreground is given
//     back at the end of Wait. In the background it grabs nothing.
//   - Waiting is done by the kernel: waitid on the direct child, SIGCHLD,
//     and poll on pidfds while stopping. Nothing polls on a timer (unless
//     pidfds cannot be had). The tree is read from /proc by Signal and Owns,
//     and while stopping only at the start, when the processes it knew are
//     all gone, and when the grace ends.
//
// It does not guarantee:
//
//   - that a process is found that is not below this one: started on the
//     command's request by a daemon outside the tree (systemd-run, at,
//     docker), even with a copy of the command's environment, while this
//     process lives; StopLeftovers finds it later only if it carries the
//     marker;
//   - that StopLeftovers finds a leftover that cleared or rewrote its
//     environment and was reparented to init when its wrapper died;
//   - that processes running as another user (sudo -u, su) can be stopped
//     by a wrapper that is not root: their environment cannot be read and
//     signals to them fail; Stop logs them and does not wait for them, and
//     StopLeftovers returns an error naming them;
//   - job control: a command stopped by Ctrl-Z (SIGTSTP) stays stopped, and
//     this process goes on waiting for it.
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
