package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencerun/fencerun/cmd/internal/duration"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// ReleaseCmd is `fencerun release KEY --force`.
type ReleaseCmd struct {
	Key      string `arg:"" optional:"" predictor:"key" help:"The key to release."`
	Resident string `placeholder:"PATH" help:"Release the resident role of the store file PATH instead of a key."`
	Pick     `embed:""`
	Force    bool `env:"-" help:"Required: revoke the lease. The holder's fence breaks, its command is stopped and it exits 76. Also clears a corrupt record."`
}

// Pick is --slot and --pid, which pick one holder of a key held in
// slots or shared (M3) for release and cancel; without them, every
// holder is picked. Their variables are not FENCERUN_SLOT, which a
// fenced command is given: a release run from inside one would pick
// that command's own slot.
type Pick struct {
	Slot *int `placeholder:"N" env:"FENCERUN_HOLDER_SLOT" help:"Only the holder in slot N (of a key held with --slots); the others go on."`
	PID  int  `placeholder:"P" env:"FENCERUN_HOLDER_PID" help:"Only the holder whose fencerun has pid P (the pid status shows); the others go on."`
}

// validate checks that at most one way of picking is given, in range.
func (p Pick) validate(resident string) error {
	switch {
	case p.Slot != nil && p.PID != 0:
		return usage("--slot and --pid each pick one holder: give one of them")
	case p.Slot != nil && (*p.Slot < 0 || *p.Slot >= store.MaxSlots):
		return usage("--slot %d is out of range: 0 to %d", *p.Slot, store.MaxSlots-1)
	case p.PID < 0:
		return usage("--pid %d is not a pid", p.PID)
	case resident != "" && (p.Slot != nil || p.PID != 0):
		return usage("--slot and --pid are for keys: a resident role has one holder")
	}
	return nil
}

// which is the store's Which for the pick.
func (p Pick) which() store.Which { return store.Which{Slot: p.Slot, PID: p.PID} }

// none says that no holder was there to pick: "is free", "has no holder
// in slot 2", "has no holder with pid 12".
func (p Pick) none() string {
	switch {
	case p.Slot != nil:
		return fmt.Sprintf("has no holder in slot %d", *p.Slot)
	case p.PID != 0:
		return fmt.Sprintf("has no holder with pid %d", p.PID)
	}
	return "is free"
}

// picked is the holders of st that w picks; none when st could not be
// read.
func picked(st *store.Status, err error, w store.Which) []store.Holder {
	if err != nil || st == nil {
		return nil
	}
	var out []store.Holder
	for _, h := range holdersOf(*st) {
		if w.Picks(&h) {
			out = append(out, h)
		}
	}
	return out
}

// Validate requires --force: a release from outside stops someone's command.
func (c *ReleaseCmd) Validate() error {
	if !c.Force {
		return usage("release revokes the lease of a running holder and stops its command; say --force to do it")
	}
	if err := c.Pick.validate(c.Resident); err != nil {
		return err
	}
	return validTarget("release", c.Key, c.Resident)
}

// Run revokes the lease of each holder picked.
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
	// key at its own moment, which is these holders unless one let go in
	// between (then the fence named is simply no longer held).
	before, serr := backend.Status(ctx, c.Key)
	had, err := backend.Revoke(ctx, c.Key, c.which())
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	revoked := picked(before, serr, c.which())
	switch {
	case !had && c.which().All():
		fmt.Printf("%s was free: nothing to release\n", c.Key)
	case !had:
		fmt.Printf("%s %s: nothing to release\n", c.Key, c.none())
	case len(revoked) > 0:
		for _, h := range revoked {
			fmt.Println(revokedLine(c.Key, h))
		}
	case serr != nil:
		fmt.Printf("released %s: cleared its unreadable state (%s); its fencing tokens go on above every earlier one\n", c.Key, store.Printable(serr.Error()))
	default:
		// Free when read: Revoke cleared what failed closed (junk in the
		// key's files' places, the store's fence reservation; its warning
		// names it), or broke a holder that came in between.
		fmt.Printf("released %s: it had no holder when read; cleared unusable state (logged above), and a holder that took it since has its fence broken (it exits 76)\n", c.Key)
	}
	return nil
}

// revokedLine says what release did to h, a holder of key.
func revokedLine(key string, h store.Holder) string {
	if h.Foreign {
		// etcdctl lock does not watch its lease (E9): say what happens.
		return fmt.Sprintf("released %s: revoked %s; it is not fencerun and does not watch its lease, so its command is not stopped: "+
			"it runs on unfenced beside the next holder unless stopped where it runs (its fence, the revision, no longer compares)", key, named(h))
	}
	held := ""
	if !h.Acquired.IsZero() {
		held = fmt.Sprintf(", held for %s", time.Since(h.Acquired).Round(time.Second))
	}
	return fmt.Sprintf("released %s: revoked %s%s; its command is being stopped and it exits 76", key, named(h), held)
}

// CancelCmd is `fencerun cancel KEY`.
type CancelCmd struct {
	Key      string `arg:"" optional:"" predictor:"key" help:"The key whose holder to ask."`
	Resident string `placeholder:"PATH" help:"Ask the holder of the resident role of the store file PATH instead of a key."`
	Pick     `embed:""`
	Wait     duration.Wait `short:"w" default:"0" placeholder:"D" env:"FENCERUN_CANCEL_WAIT" help:"Also wait until the cancelled holders have stopped their commands and let go of the key (which may go straight to the next waiter), at most D (forever: without limit): exit 75 if one has not by then. 0, the default, does not wait."`
}

// Validate checks the key and the pick.
func (c *CancelCmd) Validate() error {
	if err := c.Pick.validate(c.Resident); err != nil {
		return err
	}
	return validTarget("cancel", c.Key, c.Resident)
}

// Run records the request and, with --wait, waits for the holders asked
// to let go.
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
	// The holders the request is for: --wait waits for them to let go,
	// not for the key to be free (a waiter may take it at once).
	before, err := backend.Status(ctx, c.Key)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	had, err := backend.Cancel(ctx, c.Key, c.which())
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if !had {
		fmt.Printf("%s %s: nothing to cancel\n", c.Key, c.none())
		return nil
	}
	asked := picked(before, nil, c.which())
	if len(asked) == 0 {
		fmt.Printf("asked the holder of %s to stop its command\n", c.Key)
	}
	var fences []uint64
	for _, h := range asked {
		fmt.Printf("asked the holder of %s to stop its command (it exits 77): %s\n", c.Key, named(h))
		fences = append(fences, h.Fence)
	}
	if c.Wait.None() || len(fences) == 0 {
		return nil
	}
	return waitLetGo(c.Key, fences, c.Wait, func() (*store.Status, error) { return backend.Status(ctx, c.Key) })
}

// waitLetGo waits, at most wait, until every holder of what (a key, or a
// store's role) with one of fences has let go, reading status.
func waitLetGo(what string, fences []uint64, wait duration.Wait, status func() (*store.Status, error)) error {
	// A rare, interactive wait: a status read every 50ms costs nothing
	// that matters and needs no watch of the store's internals.
	deadline := time.Now().Add(wait.Limit())
	for {
		st, err := status()
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		var left []uint64
		for _, h := range holdersOf(*st) {
			if slices.Contains(fences, h.Fence) {
				left = append(left, h.Fence)
			}
		}
		if len(left) == 0 {
			fmt.Printf("%s let go\n", holdersWith(what, fences, "has", "have"))
			return nil
		}
		if !wait.Forever() && time.Now().After(deadline) {
			return fail(exitConflict, "%s it after %v", holdersWith(what, left, "still holds", "still hold"), wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdersWith names the holders of what with fences, and the verb for
// one or for many: "the holder of k (fence 3) has", "the holders of k
// (fences 3, 5) have".
func holdersWith(what string, fences []uint64, one, many string) string {
	if len(fences) == 1 {
		return fmt.Sprintf("the holder of %s (fence %d) %s", what, fences[0], one)
	}
	s := make([]string, len(fences))
	for i, f := range fences {
		s[i] = strconv.FormatUint(f, 10)
	}
	return fmt.Sprintf("the holders of %s (fences %s) %s", what, strings.Join(s, ", "), many)
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
		if p.What == "leftovers" && p.Count == 0 {
			fmt.Printf("removed the empty cgroup of dead holder pid %d of %s (%s)\n", p.HolderPID, p.Key, p.Path)
			continue
		}
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
		if held(st) || len(st.Waiters) > 0 || st.Key == "" {
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

// pruneLeftovers stops what dead holders left running on free keys, and
// removes the cgroups they left (empty ones too), as their next holder
// would: it takes each such key without waiting (a fence
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
		if left, _ := supervisor.Remain(st.Leftovers); !left {
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
