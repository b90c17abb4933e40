package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencerun/fencerun/cmd/internal/duration"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// ReleaseCmd is `fencerun release KEY --force`.
type ReleaseCmd struct {
	Key      string `arg:"" optional:"" predictor:"key" help:"The key to release."`
	Resident string `placeholder:"PATH" help:"Release the resident role of the store file PATH instead of a key."`
	Force    bool   `env:"-" help:"Required: revoke the lease. The holder's fence breaks, its command is stopped and it exits 76. Also clears a corrupt record."`
}

// Validate requires --force: a release from outside stops someone's command.
func (c *ReleaseCmd) Validate() error {
	if !c.Force {
		return usage("release revokes the lease of a running holder and stops its command; say --force to do it")
	}
	return validTarget("release", c.Key, c.Resident)
}

// Run revokes the lease.
func (c *ReleaseCmd) Run(ctx context.Context, g *Globals) error {
	if c.Resident != "" {
		return releaseResident(c.Resident)
	}
	backend, err := g.openStore(false)
	var missing *noState
	if errors.As(err, &missing) {
		fmt.Printf("%s was free: nothing to release (no state root at %s)\n", c.Key, missing.root)
		return nil
	}
	if err != nil {
		return err
	}
	defer backend.Close()
	// Who is revoked, read just before: Revoke breaks whoever holds the
	// key at its own moment, which is this holder unless it let go in
	// between (then the fence named is simply no longer held).
	before, serr := backend.Status(ctx, c.Key)
	had, err := backend.Revoke(ctx, c.Key, store.Which{})
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	switch {
	case !had:
		fmt.Printf("%s was free: nothing to release\n", c.Key)
	case serr == nil && before.Holder != nil && before.Holder.Foreign:
		// etcdctl lock does not watch its lease (E9): say what happens.
		fmt.Printf("released %s: revoked %s, fence %d; it is not fencerun and does not watch its lease, so its command is not stopped: "+
			"it runs on unfenced beside the next holder unless stopped where it runs (its fence, the revision, no longer compares)\n",
			c.Key, who(before.Holder), before.Holder.Fence)
	case serr == nil && before.Holder != nil:
		h := before.Holder
		held := ""
		if !h.Acquired.IsZero() {
			held = fmt.Sprintf(", held for %s", time.Since(h.Acquired).Round(time.Second))
		}
		fmt.Printf("released %s: revoked %s, fence %d%s; its command is being stopped and it exits 76\n",
			c.Key, who(h), h.Fence, held)
	case serr != nil:
		fmt.Printf("released %s: cleared its unreadable state (%s); its fencing tokens go on above every earlier one\n", c.Key, store.Printable(serr.Error()))
	case serr == nil:
		// Free when read: Revoke cleared what failed closed (junk in the
		// key's files' places, the store's fence reservation; its warning
		// names it), or broke a holder that came in between.
		fmt.Printf("released %s: it had no holder when read; cleared unusable state (logged above), and a holder that took it since has its fence broken (it exits 76)\n", c.Key)
	default:
		fmt.Printf("released %s: its holder's fence is broken and its command is being stopped (it exits 76)\n", c.Key)
	}
	return nil
}

// CancelCmd is `fencerun cancel KEY`.
type CancelCmd struct {
	Key      string        `arg:"" optional:"" predictor:"key" help:"The key whose holder to ask."`
	Resident string        `placeholder:"PATH" help:"Ask the holder of the resident role of the store file PATH instead of a key."`
	Wait     duration.Wait `short:"w" default:"0" placeholder:"D" env:"FENCERUN_CANCEL_WAIT" help:"Also wait until the cancelled holder has stopped its command and let go of the key (which may go straight to the next waiter), at most D (forever: without limit): exit 75 if it has not by then. 0, the default, does not wait."`
}

// Validate checks the key.
func (c *CancelCmd) Validate() error {
	return validTarget("cancel", c.Key, c.Resident)
}

// Run records the request and, with --wait, waits for the key to be free.
func (c *CancelCmd) Run(ctx context.Context, g *Globals) error {
	if c.Resident != "" {
		return cancelResident(c.Resident, c.Wait)
	}
	backend, err := g.openStore(false)
	var missing *noState
	if errors.As(err, &missing) {
		fmt.Printf("%s is free: nothing to cancel (no state root at %s)\n", c.Key, missing.root)
		return nil
	}
	if err != nil {
		return err
	}
	defer backend.Close()
	// The holder the request is for: --wait waits for it to let go, not
	// for the key to be free (a waiter may take it at once).
	before, err := backend.Status(ctx, c.Key)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	had, err := backend.Cancel(ctx, c.Key, store.Which{})
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if !had {
		fmt.Printf("%s is free: nothing to cancel\n", c.Key)
		return nil
	}
	fmt.Printf("asked the holder of %s to stop its command\n", c.Key)
	if c.Wait.None() || before.Holder == nil {
		return nil
	}
	return waitLetGo(c.Key, before.Holder.Fence, c.Wait, func() (*store.Status, error) { return backend.Status(ctx, c.Key) })
}

// waitLetGo waits, at most wait, until the holder with fence of what
// (a key, or a store's role) has let go, reading status.
func waitLetGo(what string, fence uint64, wait duration.Wait, status func() (*store.Status, error)) error {
	// A rare, interactive wait: a status read every 50ms costs nothing
	// that matters and needs no watch of the store's internals.
	deadline := time.Now().Add(wait.Limit())
	for {
		st, err := status()
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		if st.Holder == nil || st.Holder.Fence != fence {
			fmt.Printf("the holder of %s (fence %d) has let go\n", what, fence)
			return nil
		}
		if !wait.Forever() && time.Now().After(deadline) {
			return fail(exitConflict, "the holder of %s (fence %d) still holds it after %v", what, fence, wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PruneCmd is `fencerun prune`.
type PruneCmd struct {
	JSON       bool   `name:"json" help:"Print what was removed as a JSON array."`
	ForgetHost string `placeholder:"HOST" help:"etcd: instead of pruning, drop the leftover records of HOST, a host gone for good (nothing it ran can run any more); those of its live contenders stay."`
	History    bool   `help:"Also drop the history of every free key (fencerun history); without it, histories are kept."`
}

// hostForgetter is a backend that keeps other hosts' records (etcd).
type hostForgetter interface {
	ForgetHost(ctx context.Context, host string) ([]store.Pruned, error)
}

// forgetHost drops HOST's leftover records (E11).
func (c *PruneCmd) forgetHost(ctx context.Context, backend store.Store) ([]store.Pruned, error) {
	f, ok := backend.(hostForgetter)
	if !ok {
		return nil, usage("--forget-host is for etcd (--etcd): the file backend keeps no other host's records")
	}
	if me, _ := os.Hostname(); c.ForgetHost == me {
		return nil, usage("--forget-host %s is this host: prune without it stops this host's leftovers", c.ForgetHost)
	}
	removed, err := f.ForgetHost(ctx, c.ForgetHost)
	if err != nil {
		return removed, fail(exitFailed, "%v", err)
	}
	return removed, nil
}

// Run prunes and says what it removed.
func (c *PruneCmd) Run(ctx context.Context, g *Globals) error {
	if c.ForgetHost != "" && g.Etcd == "" {
		return usage("--forget-host is for etcd (--etcd): the file backend keeps no other host's records")
	}
	var removed []store.Pruned
	backend, err := g.openStore(false)
	var missing *noState
	switch {
	case errors.As(err, &missing):
		if !c.JSON {
			fmt.Printf("nothing to prune: no state root at %s\n", missing.root)
			return nil
		}
	case err != nil:
		return err
	case c.ForgetHost != "":
		defer backend.Close()
		if removed, err = c.forgetHost(ctx, backend); err != nil {
			return err
		}
	default:
		defer backend.Close()
		if removed, err = c.prune(ctx, backend, g); err != nil {
			return err
		}
	}
	if c.JSON {
		if removed == nil {
			removed = []store.Pruned{}
		}
		return writeJSON(os.Stdout, removed)
	}
	if len(removed) == 0 {
		fmt.Println("nothing to prune")
	}
	for _, p := range removed {
		if p.What == "leftovers" {
			fmt.Printf("stopped leftovers of %s: %d processes of dead holder pid %d\n", p.Key, p.Count, p.HolderPID)
			continue
		}
		fmt.Printf("removed %s", p.What)
		if p.Key != "" {
			fmt.Printf(" of %s", p.Key)
		}
		if p.Path != "" {
			fmt.Printf(" (%s)", p.Path)
		}
		fmt.Println()
	}
	return nil
}

// prune prunes backend; with --history it drops the free keys' histories
// first, so that their directories go too, and again after the leftovers
// were stopped, so that prune's own takeovers leave no holding.
func (c *PruneCmd) prune(ctx context.Context, backend store.Store, g *Globals) ([]store.Pruned, error) {
	var removed []store.Pruned
	if c.History {
		forgot, err := forgetHistories(ctx, backend)
		if err != nil {
			return forgot, fail(exitFailed, "%v", err)
		}
		removed = forgot
	}
	pruned, err := backend.Prune(ctx)
	removed = append(removed, pruned...)
	if err != nil {
		return removed, fail(exitFailed, "%v", err)
	}
	stopped, err := pruneLeftovers(ctx, backend, g)
	removed = append(removed, stopped...)
	if err != nil {
		return removed, err
	}
	if c.History && len(stopped) > 0 {
		if _, err := forgetHistories(ctx, backend); err != nil {
			return removed, fail(exitFailed, "%v", err)
		}
	}
	return removed, nil
}

// forgetHistories drops the history of every free key (prune --history);
// the store refuses a key held meanwhile.
func forgetHistories(ctx context.Context, backend store.Store) ([]store.Pruned, error) {
	all, err := backend.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []store.Pruned
	for _, st := range all {
		if st.Holder != nil || len(st.Waiters) > 0 || st.Key == "" {
			continue
		}
		dropped, err := backend.ForgetHistory(ctx, st.Key)
		if err != nil {
			return out, err
		}
		if dropped {
			out = append(out, store.Pruned{Key: st.Key, What: "history"})
		}
	}
	return out, nil
}

// pruneLeftovers stops what dead holders left running on free keys, as
// their next holder would: it takes each such key without waiting (a fence
// is used up), stops the trees, confirms them stopped and releases. A key
// someone holds or waits for is left to that holder.
func pruneLeftovers(ctx context.Context, backend store.Store, g *Globals) ([]store.Pruned, error) {
	all, err := backend.List(ctx)
	if err != nil {
		return nil, fail(exitFailed, "%v", err)
	}
	var out []store.Pruned
	for _, st := range all {
		if st.State != store.Free || len(st.Leftovers) == 0 || len(st.Waiters) > 0 {
			continue
		}
		if n, _ := supervisor.CountTrees(st.Leftovers); n == 0 {
			continue
		}
		lease, _, err := backend.Acquire(ctx, st.Key, store.Claim{Name: "fencerun prune", TTL: 30 * time.Second})
		if err != nil || lease == nil {
			continue // taken meanwhile: its holder stops them
		}
		p := lease.Predecessor()
		if p == nil {
			_ = lease.Release(ctx)
			continue
		}
		// Another host's trees stay recorded for a fencerun there
		// (LeftoversStopped forgets this host's only).
		n, _, err := supervisor.StopTrees(ctx, p.Leftovers, supervisor.StopConfig{Grace: pruneGrace, Logger: g.log.Named("supervisor")})
		if err == nil {
			err = lease.LeftoversStopped(ctx)
		}
		if rerr := lease.Release(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return out, fail(exitFailed, "%s: %v", st.Key, err)
		}
		last := p.Leftovers[len(p.Leftovers)-1]
		out = append(out, store.Pruned{Key: st.Key, What: "leftovers", Path: last.Cgroup, HolderPID: last.HolderPID, Count: n})
	}
	return out, nil
}

// pruneGrace is prune's grace for dead holders' leftovers: run's default.
const pruneGrace = 10 * time.Second
