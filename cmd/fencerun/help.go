package main

// The long help of each command: what it means, not only how to call it
// (SPEC.md: --help explains the semantics).

// Help explains run.
func (RunCmd) Help() string {
	return `Runs COMMAND only while this process holds the lease, and stops COMMAND's whole process tree the moment the lease is lost.

With --key, the lease is KEY's: waiters are served in arrival order (-n fails at once, --wait D gives up after D, both with exit 75 or -E). With --resident PATH, the lease is the resident role of the store file PATH, held by a kernel lock on PATH.resident.lock; a busy role fails at once (exit 75, naming the holder) unless --wait is given, and a newer build of COMMAND asks an older holder to hand over (it exits 77).

The lease is renewed every TTL/3. If it is revoked (release --force), taken over, or cannot be renewed in time, COMMAND gets --kill-signal, then SIGCONT, then SIGKILL after --grace (cut short so the tree is dead before the lease expires), and fencerun exits 76. A holder that is alive is never taken from, even past its TTL; one that died is taken over at once, and the next holder stops its leftovers first.

COMMAND runs in its own process group with its stdin, stdout and stderr untouched; fencerun is its child subreaper, so descendants that call setsid or double-fork are stopped too. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH are forwarded to the group; a signal while waiting ends the wait (exit 128+N). COMMAND gets FENCERUN_KEY or FENCERUN_RESIDENT, FENCERUN_FENCE (a fencing token greater than every earlier one) and FENCERUN_TICK (for 'fencerun tick').

Exit codes: COMMAND's own, or 128+N if it died of signal N; 75 not acquired; 76 fence broken; 77 cancelled or handed over; 78 stuck; 124 --timeout; 125 fencerun failed; 126 not executable; 127 not found.`
}

// Help explains status.
func (StatusCmd) Help() string {
	return `Shows one key's lease and its waiters in order, or with --resident PATH the resident role of a store file. Nothing is written.

States: held (a live holder), expired (the holder is past its expiry; it may still be alive and is not taken from), free, corrupt (a state file cannot be read; the error names it; 'release --force KEY' clears it), and for residents stuck (ticked once, then silent for its --stuck-after).

The holder's pid is the fencerun process that holds the lease; the command's own pid is shown beside it. The lease's secret token is never shown. --json prints one object {"key" or "store", "state", "holder" or null, "waiters"} with RFC 3339 times. --exit-code exits 0 held, 3 free, 4 expired, 5 corrupt; without it a corrupt key exits 125.`
}

// Help explains list.
func (ListCmd) Help() string {
	return `Lists every key of the state root, sorted: KEY, STATE, HOLDER, HELD-FOR, WAITERS, REASON. A key whose state cannot be read is listed as corrupt with the reason; the others are listed as usual. --json prints an array of the objects 'status --json' prints.`
}

// Help explains release.
func (ReleaseCmd) Help() string {
	return `Revokes KEY's lease. Its holder learns of it at once, stops its command (stop signal, grace, SIGKILL) and exits 76; the next waiter gets the key only once that holder has let go or is known dead, so two commands never overlap. --force is required, because this stops someone's command. It also clears corrupt state of KEY, restarting its fencing tokens above every earlier one. Releasing a free key succeeds and says so.`
}

// Help explains cancel.
func (CancelCmd) Help() string {
	return `Asks the holder of KEY to stop its command gracefully (stop signal, grace, SIGKILL); the holder releases and exits 77. Exits 0 once the request is recorded. With --wait D, waits until that holder has let go (the key may pass straight to the next waiter), exiting 75 if it has not after D. Cancelling a free key succeeds and says so.`
}

// Help explains prune.
func (PruneCmd) Help() string {
	return `Removes what dead processes left: the lease records of holders that died and whose lease expired (their leftovers are still stopped by the next holder), queue entries of waiters that died, and stray temporary files. Never touches a live holder or waiter. Key directories stay: they carry the fencing tokens. Prints what it removed (--json: an array of {key, what, path}).`
}
