package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/alecthomas/kong"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/store"
)

// Once per ID (O1, O2). A run with --once ID (or --once-per D, whose ID
// is the start of the current period) looks for ID among the key's done
// IDs before it takes the lease, so that a run that finds it done neither
// runs nor waits; while it waits, so that it gives up as soon as another
// run marks it (the store wakes it); and once it holds the lease, before
// its command can start, which decides: the mark is written with that
// holder's release, before anyone can take the lease after it. Only a
// command that exits 0 under the lease marks ID done (package fenced).

// validOnce checks --once, --once-per and --once-exit.
func (r *RunCmd) validOnce(kctx *kong.Context) error {
	switch {
	case r.Once != "" && r.OncePer != 0:
		return usage("--once and --once-per contradict each other: --once-per makes the ID itself")
	case r.OncePer < 0:
		return usage("--once-per %v is negative", r.OncePer)
	case r.OncePer != 0 && (r.OncePer < time.Second || r.OncePer%time.Second != 0):
		return usage("--once-per %v is not a whole number of seconds of at least 1s", r.OncePer)
	case r.OnceExit < 0 || r.OnceExit > 255:
		return usage("--once-exit %d is not an exit code (0 to 255)", r.OnceExit)
	case r.Once == "" && r.OncePer == 0:
		if typed(kctx, "once-exit") {
			return usage("--once-exit says how a run whose ID is done exits; it goes with --once or --once-per")
		}
		return nil
	case r.Resident != "":
		return usage("--once and --once-per are for keys: a resident role keeps no done IDs")
	}
	if r.Once != "" {
		if err := store.ValidateID(r.Once); err != nil {
			return usage("%v", err)
		}
	}
	return nil
}

// onceID is the run's ID at now: --once's, or the UTC start of --once-per's
// current period, floor(unix seconds / D) * D, in RFC 3339; empty without
// either.
func (r *RunCmd) onceID(now time.Time) string {
	if r.OncePer == 0 {
		return r.Once
	}
	per := int64(r.OncePer / time.Second)
	return time.Unix(now.Unix()/per*per, 0).UTC().Format(time.RFC3339)
}

// checkDone returns an error wrapping fenced.ErrAlreadyDone, saying who
// did it, when ID is among key's done IDs; nil when it is not.
func (r *RunCmd) checkDone(ctx context.Context, st store.Store) error {
	done, err := st.Done(ctx, *r.Key)
	if errors.Is(err, store.ErrCorrupt) {
		return fail(exitFailed, "%v (fencerun once-reset %s %s --force clears the key's done IDs)", err, *r.Key, r.onceFor)
	}
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	return r.alreadyDone(store.FindDone(done, r.onceFor))
}

// alreadyDone is the run's end when d, the mark of its ID, is not nil.
func (r *RunCmd) alreadyDone(d *store.Done) error {
	if d == nil {
		return nil
	}
	return fenced.AlreadyDonef("%s of %s was done by %s at %s with fence %d; not running it again",
		r.onceFor, *r.Key, who(&store.Holder{Name: d.Name, PID: d.PID, Host: d.Host}), d.At.Format(time.RFC3339), d.Fence)
}

// doneMeanwhile ends a wait whose ID another run did meanwhile.
type doneMeanwhile struct{ d *store.Done }

func (*doneMeanwhile) Error() string { return "the ID was done meanwhile" }

// acquireOnce is acquireKey for a run with an ID: it looks for the ID
// before it takes the lease and again once it holds it (see above), and
// while it waits the store tells it as soon as the ID is done
// (store.Store.AwaitDone), which ends the wait. A lease found with the ID
// done is given back at once: its predecessors' leftovers, not stopped,
// stay with the key for the next holder.
func (r *RunCmd) acquireOnce(ctx context.Context, st store.Store, claim store.Claim, report *waitReport) (store.Lease, error) {
	if err := r.checkDone(ctx, st); err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if claim.Wait {
		go func() {
			if d, _ := st.AwaitDone(waitCtx, *r.Key, r.onceFor); d != nil {
				cancel(&doneMeanwhile{d})
			}
		}()
	}
	lease, err := r.acquireKey(waitCtx, st, claim, report)
	if lease == nil {
		var dm *doneMeanwhile
		if errors.As(context.Cause(waitCtx), &dm) {
			return nil, r.alreadyDone(dm.d)
		}
		return nil, err
	}
	if err := r.checkDone(ctx, st); err != nil {
		return nil, errors.Join(err, lease.Release(ctx))
	}
	return lease, nil
}

// OnceResetCmd is `fencerun once-reset KEY ID --force`.
type OnceResetCmd struct {
	Key   string `arg:"" predictor:"key" help:"The key."`
	ID    string `arg:"" name:"id" help:"The done ID to reopen (as status shows it)."`
	Force bool   `env:"-" help:"Required: reopen the ID, so that the next run for it runs its command again."`
}

// Validate requires --force: a reopened ID runs its command again.
func (c *OnceResetCmd) Validate() error {
	if !c.Force {
		return usage("once-reset makes the next run for %s run its command again; say --force to do it", store.Printable(c.ID))
	}
	if err := validKey(c.Key); err != nil {
		return err
	}
	if err := store.ValidateID(c.ID); err != nil {
		return usage("%v", err)
	}
	return nil
}

// Run reopens the ID.
func (c *OnceResetCmd) Run(ctx context.Context, g *Globals) error {
	backend, err := g.openStore(false)
	var missing *noState
	if errors.As(err, &missing) {
		fmt.Printf("%s of %s was not done: nothing to reopen (no state root at %s)\n", c.ID, c.Key, missing.root)
		return nil
	}
	if err != nil {
		return err
	}
	defer backend.Close()
	had, err := backend.Reopen(ctx, c.Key, c.ID)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if !had {
		fmt.Printf("%s of %s was not done: nothing to reopen\n", c.ID, c.Key)
		return nil
	}
	fmt.Printf("reopened %s of %s: the next run for it runs its command\n", c.ID, c.Key)
	return nil
}

// shownDone is how many done IDs status prints as text; --json gives all.
const shownDone = 10

// printDone prints a key's done IDs, newest first, after its status.
func printDone(w io.Writer, done []store.Done, now time.Time) {
	if len(done) == 0 {
		return
	}
	fmt.Fprintf(w, "done IDs: %d, newest first\n", len(done))
	for i, d := range done {
		if i == shownDone {
			fmt.Fprintf(w, "  ... %d more (status --json lists them all)\n", len(done)-shownDone)
			break
		}
		fmt.Fprintf(w, "  %s  fence %d, %s, at %s (%s)\n", store.Printable(d.ID), d.Fence,
			who(&store.Holder{Name: d.Name, PID: d.PID, Host: d.Host}), d.At.Format(time.RFC3339), ago(d.At, now))
	}
}

// Help explains once-reset.
func (OnceResetCmd) Help() string {
	return `Reopens ID of KEY, an ID that a run with --once ID (or --once-per) completed: the next run for it, on any host sharing the store, runs its command again. --force is required, because a reopened ID runs its command again. status KEY lists the done IDs (the last 1,000 per key are kept). Reopening an ID that is not done succeeds and says so. Done IDs that cannot be read (a corrupt state file, which stops every --once run of the key with exit 125) are all cleared.`
}

// Usage of once-reset.
func (OnceResetCmd) Usage() string { return "once-reset KEY ID --force" }

// Examples of once-reset.
func (OnceResetCmd) Examples() string {
	return `  fencerun status reports
  # run the report of that hour again at the next cron run
  fencerun once-reset reports 2026-12-04T21:00:00Z --force
`
}
