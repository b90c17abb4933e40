package cli

// The long help of each command: what it means, not only how to call it
// (CONTRACT.md: --help explains the semantics).

// Help explains run.
func (RunCmd) Help() string {
	return `Runs COMMAND only while this process holds the lease, and stops COMMAND's whole process tree the moment the lease is lost.

With --key, the lease is KEY's: waiters are served in arrival order (-n fails at once, --wait D gives up after D, both with exit 75 or -E). With --resident PATH, the lease is the resident role of the store file PATH, held by a kernel lock on PATH.resident.lock; a busy role fails at once (exit 75, naming the holder) unless --wait is given, and a newer build of COMMAND asks an older holder to hand over (it exits 77).

The lease is renewed every TTL/3. If it is revoked (release --force), taken over, or cannot be renewed in time, COMMAND gets --kill-signal, then SIGCONT, then SIGKILL after --grace (cut short so the tree is dead before the lease expires), and fencerun exits 76. A holder that is alive is never taken from, even past its TTL; one that died is taken over at once, and the next holder stops its leftovers first.

COMMAND runs in its own process group with its stdin, stdout and stderr untouched; fencerun is its child subreaper, so descendants that call setsid or double-fork are stopped too. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM, SIGVTALRM and SIGXCPU are forwarded to the group (SIGPIPE and SIGPROF are dropped); a signal while waiting ends the wait (exit 128+N). COMMAND gets FENCERUN_KEY or FENCERUN_RESIDENT, FENCERUN_FENCE (a fencing token greater than every earlier one), FENCERUN_TICK (for 'fencerun tick') and, with --slots, FENCERUN_SLOT.

With --slots N, at most N holders hold KEY at once, each in a slot of its own: COMMAND gets FENCERUN_SLOT (0 to N-1, the lowest free slot; no two live holders share one), for a port, a scratch directory or a GPU index. FENCERUN_FENCE still rises across all slots, and each holder is renewed, fenced and stopped alone: a revoked or dead holder frees only its slot, after its leftovers are stopped. Every holder and waiter of KEY must give the same N (else exit 125, naming both); --slots 1 is the exclusive hold. With --shared (-s), as flock -s, any number of shared holders hold KEY together, and an exclusive one (-x, the default) alone; waiters are served in arrival order across both kinds, so shared waiters in a row start together and a shared waiter behind a waiting exclusive one waits for it (no writer starvation). --shared does not go with --slots.

With --once ID, COMMAND runs to success at most once per KEY and ID, across every host and user sharing the store: a run that finds ID done exits 0 (or --once-exit N) at once, without running or waiting, with one info line naming who did it; only an exit 0 while the lease is held marks ID done, with the release, so a failed, timed-out, cancelled or revoked run leaves it for the next run. A waiter whose ID another run does meanwhile gives up at once, with the same exit. --once-per D makes the ID the UTC start of the current period of D. COMMAND gets FENCERUN_ONCE=ID.

Exit codes: COMMAND's own, or 128+N if it died of signal N; 75 not acquired; 76 fence broken; 77 cancelled or handed over; 78 stuck; 124 --timeout; 125 fencerun failed; 126 not executable; 127 not found.`
}

// Help explains status.
func (StatusCmd) Help() string {
	return `Shows one key's lease and its waiters in order, or with --resident PATH the resident role of a store file. Nothing is written.

States: held (a live holder), expired (the holder is past its expiry; it may still be alive and is not taken from), free, corrupt (a state file cannot be read; the error names it; 'release --force KEY' clears it), and for residents stuck (ticked once, then silent for its --stuck-after).

The holder's pid is the fencerun process that holds the lease; the command's own pid is shown beside it. The lease's secret token is never shown. A key held in slots (--slots) or shared (--shared) shows every holder on a line of its own, with its slot or kind, pid, fence and age, and each waiter with what it waits for. A key's done --once IDs follow, newest first, with the fence, holder and time of the run that did each (the newest 10 as text). --json prints one object {"key" or "store", "state", "holder" (the exclusive holder, else null), "holders" (every holder, each with its kind, and slot with --slots), "waiters" (each with its kind), and "done" where there are done IDs} with RFC 3339 times. --exit-code exits 0 held, 3 free, 4 expired, 5 corrupt; without it a corrupt key exits 125.`
}

// Help explains list.
func (ListCmd) Help() string {
	return `Lists every key of the state root, sorted: KEY, STATE, HOLDER, HELD-FOR, WAITERS, REASON. HOLDER is the exclusive holder's name and pid, or for a key of many holders their count: "3 of 4 slots", "2 shared"; HELD-FOR is then the longest holding's, and REASON the one they all give. A key whose state cannot be read is listed as corrupt with the reason; the others are listed as usual. --json prints an array of the objects 'status --json' prints.`
}

// Help explains release.
func (ReleaseCmd) Help() string {
	return `Revokes KEY's lease. Its holder learns of it at once, stops its command (stop signal, grace, SIGKILL) and exits 76; the next waiter gets the key only once that holder has let go or is known dead, so two commands never overlap. --force is required, because this stops someone's command. It also clears corrupt state of KEY, restarting its fencing tokens above every earlier one. Releasing a free key succeeds and says so. A key held in slots or shared has every holder revoked, or with --slot N or --pid P only that one: the others go on. It names each holder it revoked (name, pid, fence, slot).`
}

// Help explains cancel.
func (CancelCmd) Help() string {
	return `Asks the holder of KEY to stop its command gracefully (stop signal, grace, SIGKILL); the holder releases and exits 77. Exits 0 once the request is recorded. With --wait D, waits until that holder has let go (the key may pass straight to the next waiter), exiting 75 if it has not after D. Cancelling a free key succeeds and says so. A key held in slots or shared has every holder asked, or with --slot N or --pid P only that one; --wait waits for those asked.`
}

// Help explains prune.
func (PruneCmd) Help() string {
	return `Removes what dead processes left: the lease records of holders that died and whose lease expired (their leftovers are still stopped by the next holder), queue entries of waiters that died, stray temporary files, the tick and notification sockets of runs that died without removing theirs (SIGKILL; on etcd their private directories in $TMPDIR), on a free key, the leftovers of holders that died (stopped as their next holder would stop them, and their cgroups removed, also those left empty), and the state of free keys (nobody holding, waiting or left to stop: they leave list, and their next fencing token is still above every earlier one, since tokens are the store's). Never touches a live holder or waiter, nor a live run's socket. Prints what it removed (--json: an array of {key, what, path}).`
}

// The usage lines (the real shape of each command line) and the examples
// that end each command's --help and the manual page.

// Usage of fencerun itself.
func (CLI) Usage() string { return "[global flags] COMMAND [ARG...]" }

// Examples of fencerun itself: the README's.
func (CLI) Examples() string {
	return `  # at most one deploy to staging at a time; wait up to 10 minutes for our turn
  fencerun run --key deploy:staging --wait 10m --reason "release 1.4" -- ./deploy.sh staging
  # cron: skip a run while the previous one still runs, silently (see -E)
  */5 * * * * /usr/local/bin/fencerun run --key reports -n -E 0 --timeout 4m30s -- /usr/local/bin/build-reports
  # who holds it, and who waits
  fencerun status deploy:staging
  fencerun list deploy:
  # ask the holder to stop gracefully (it exits 77), or revoke by force (it exits 76)
  fencerun cancel deploy:staging --wait 1m
  fencerun release deploy:staging --force
  # only the build in slot 2 (it exits 76); the other slots' builds go on
  fencerun release build:runner1 --slot 2 --force
`
}

// Usage of run.
func (RunCmd) Usage() string {
	return "run (--key KEY | --resident PATH) [flags] -- COMMAND [ARG...]"
}

// Examples of run: the README's cron, deploy, systemd, CI and standby lines.
func (RunCmd) Examples() string {
	return `  # deploy: one at a time, waiting up to 10 minutes for our turn
  fencerun run --key deploy:staging --wait 10m --reason "release 1.4" -- ./deploy.sh staging
  # cron: skip a run while the previous one still runs; -E 0 makes that a silent success
  */5 * * * * /usr/local/bin/fencerun run --key reports -n -E 0 --timeout 4m30s -- /usr/local/bin/build-reports
  # cron on three hosts: the report runs once an hour, by whichever host comes first
  */5 * * * * /usr/local/bin/fencerun --etcd http://etcd1:2379 run --key reports --once-per 1h -- /usr/local/bin/build-reports
  # systemd: a worker that never runs twice on this host
  ExecStart=/usr/local/bin/fencerun run --key worker:mail --ttl 15s --grace 20s -- /usr/local/bin/mail-worker
  # CI: serialise jobs that share a database on one runner
  fencerun run --key "db:${RUNNER_NAME}" --wait 20m -- make integration-test
  # CI: at most 4 builds on this runner, each on its own port 8000+slot
  fencerun run --key "build:${RUNNER_NAME}" --slots 4 --wait 1h -- sh -c 'make test PORT=$((8000 + FENCERUN_SLOT))'
  # readers of a snapshot together, and the writer that replaces it alone
  fencerun run --key snapshot -s -- ./report.sh
  fencerun run --key snapshot -x --wait 30m -- ./rebuild-snapshot.sh
  # a resident worker, and a standby that takes over the moment it is gone
  fencerun run --resident /srv/app/app.db --stuck-after 2m -- /usr/local/bin/app-worker
  fencerun run --resident /srv/app/app.db --wait forever -- /usr/local/bin/app-worker
`
}

// Usage of status.
func (StatusCmd) Usage() string {
	return "status (KEY | --resident PATH) [--json] [--exit-code]"
}

// Examples of status.
func (StatusCmd) Examples() string {
	return `  fencerun status deploy:staging
  fencerun status deploy:staging --json
  # in a script: is anyone deploying?
  fencerun status deploy:staging --exit-code >/dev/null && echo "a deploy is running"
  fencerun status --resident /srv/app/app.db
`
}

// Usage of list.
func (ListCmd) Usage() string { return "list [PREFIX] [--held] [--json]" }

// Examples of list.
func (ListCmd) Examples() string {
	return `  fencerun list
  # only the keys of one family, and only those held
  fencerun list ci:main/ --held
  fencerun list --json
`
}

// Usage of release.
func (ReleaseCmd) Usage() string {
	return "release (KEY [--slot N | --pid P] | --resident PATH) --force"
}

// Examples of release.
func (ReleaseCmd) Examples() string {
	return `  fencerun release deploy:staging --force
  # a resident that must go now (it exits 76)
  fencerun release --resident /srv/app/app.db --force
`
}

// Usage of cancel.
func (CancelCmd) Usage() string {
	return "cancel (KEY [--slot N | --pid P] [--wait D] | --resident PATH)"
}

// Examples of cancel.
func (CancelCmd) Examples() string {
	return `  # ask the holder to stop (it exits 77), and wait up to a minute for it to let go
  fencerun cancel deploy:staging --wait 1m
  # ask only the holder whose fencerun is pid 4242 of a key held shared
  fencerun cancel snapshot --pid 4242
`
}

// Usage of prune.
func (PruneCmd) Usage() string { return "prune [--json]" }

// Examples of prune.
func (PruneCmd) Examples() string {
	return `  # nightly, from cron
  17 3 * * * /usr/local/bin/fencerun prune
`
}

// Usage of tick.
func (TickCmd) Usage() string { return "tick" }

// Examples of tick.
func (TickCmd) Examples() string {
	return `  # a worker that ticks after each batch; stopped (exit 78) if it goes 2 minutes without
  fencerun run --resident /srv/app/app.db --stuck-after 2m -- sh -c 'while work-one-batch; do fencerun tick; done'
`
}

// Usage of help.
func (HelpCmd) Usage() string { return "help [COMMAND]" }

// Usage of version.
func (VersionCmd) Usage() string { return "version" }

// Usage of init.
func (InitCmd) Usage() string { return "init --group G DIR" }

// Examples of init.
func (InitCmd) Examples() string {
	return `  # a store the members of group deploy share; each of them then names it with --dir
  sudo fencerun init --group deploy /var/lib/fencerun-deploy
  fencerun --dir /var/lib/fencerun-deploy run --key deploy:prod -- ./deploy.sh
`
}
