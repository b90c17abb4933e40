package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencerun/fencerun/internal/errtext"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// StatusCmd is `fencerun status`.
type StatusCmd struct {
	Key      string `arg:"" optional:"" predictor:"key" help:"The key to show."`
	Resident string `placeholder:"PATH" help:"Show the resident role of the store file PATH instead of a key."`
	JSON     bool   `name:"json" help:"Print one JSON object: key or store, state, holder (or null), waiters, and the key's done --once IDs (done, newest first)."`
	ExitCode bool   `help:"Exit 0 when held, 3 when free, 4 when expired, 5 when corrupt."`
}

// Validate checks that exactly one of KEY and --resident is given.
func (s *StatusCmd) Validate() error {
	switch {
	case s.Key == "" && s.Resident == "":
		return usage("status needs a KEY or --resident PATH")
	case s.Key != "" && s.Resident != "":
		return usage("status takes a KEY or --resident PATH, not both")
	case s.Key != "":
		return validKey(s.Key)
	}
	return validResident(s.Resident)
}

// Run prints the status.
func (s *StatusCmd) Run(ctx context.Context, g *Globals) error {
	var (
		st      *store.Status
		done    []store.Done
		doneErr error
		used    = true // a holding or done ID is known
	)
	if s.Resident != "" {
		var err error
		if st, err = residentStatus(s.Resident); err != nil {
			return err
		}
	} else {
		backend, err := g.openStore(false)
		var missing *noState
		switch {
		case errors.As(err, &missing):
			missing.note(g.log)
			st, err = &store.Status{Key: s.Key, State: store.Free, Waiters: []store.Holder{}}, nil
			used = false
		case err != nil:
			return err
		default:
			defer backend.Close()
			st, err = backend.Status(ctx, s.Key)
			done, doneErr = backend.Done(ctx, s.Key)
			if err == nil && st.State == store.Free && len(done) == 0 && doneErr == nil {
				hs, herr := backend.History(ctx, s.Key, 1)
				used = herr != nil || len(hs) > 0
			}
		}
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrUnsafe) {
				return fail(exitFailed, "%v", err)
			}
			st = &store.Status{Key: s.Key, State: store.Corrupt, Err: err}
		}
	}
	v := view(*st)
	v.Done = done
	// Free, and no holding recorded (N2): "never used", rc 0 as any free
	// key (--exit-code: 3).
	v.NeverUsed = !used && st.State == store.Free && !held(*st) && len(st.Waiters) == 0 && v.Leftovers == nil
	if s.JSON {
		if err := writeJSON(os.Stdout, v); err != nil {
			return err
		}
	} else {
		printStatus(os.Stdout, v, time.Now())
		printDone(os.Stdout, done, time.Now())
	}
	if doneErr != nil && st.State != store.Corrupt {
		// The lease is readable, its done IDs are not (O3, B4): runs
		// without --once still work, but the key is not healthy.
		if s.ExitCode && errors.Is(doneErr, store.ErrCorrupt) {
			g.log.Error(errtext.Sentence(doneErr))
			return statusExit(store.Corrupt)
		}
		return fail(exitFailed, "%v", doneErr)
	}
	if s.ExitCode {
		return statusExit(st.State)
	}
	if st.State == store.Corrupt {
		return fail(exitFailed, "%v", st.Err)
	}
	return nil
}

// ListCmd is `fencerun list`.
type ListCmd struct {
	Prefix string `arg:"" optional:"" predictor:"key" help:"List only the keys that start with PREFIX (ci:main/ for one branch's keys)."`
	Held   bool   `help:"List only keys with a holder (held, expired or stuck), not free or corrupt ones."`
	JSON   bool   `name:"json" help:"Print a JSON array of status objects."`
}

// Validate checks that PREFIX could start a key (B1's characters).
func (l *ListCmd) Validate() error {
	if l.Prefix == "" {
		return nil
	}
	return validKey(l.Prefix)
}

// shows reports whether st passes the filters.
func (l *ListCmd) shows(st store.Status) bool {
	name := st.Key
	if name == "" {
		name = st.Store
	}
	return strings.HasPrefix(name, l.Prefix) && (!l.Held || held(st))
}

// Run lists every key.
func (l *ListCmd) Run(ctx context.Context, g *Globals) error {
	views, err := gather(ctx, g, l.shows, false)
	if err != nil {
		return err
	}
	if l.JSON {
		return writeJSON(os.Stdout, views)
	}
	now := time.Now()
	// tabwriter writes cell by cell: buffered, ten thousand keys are a few
	// writes, not 120,000 (P6).
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSTATE\tHOLDER\tHELD-FOR\tWAITERS\tREASON")
	for _, v := range views {
		st := v.Status
		holder, since, reason := listHolder(st, now)
		if st.Err != nil {
			reason = st.Err.Error()
		}
		if v.Leftovers != nil {
			reason = v.Leftovers.String()
		}
		name := st.Key
		if name == "" {
			name = store.Printable(st.Store) // a resident role, by its store path (keys never start with /)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", name, st.State, store.Printable(holder), since, len(st.Waiters), store.Printable(reason))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Flush()
}

// listHolder is list's HOLDER, HELD-FOR and REASON of st: an exclusive
// holder by name and pid, many holders by count ("3 of 4 slots", "2
// shared"), with the longest hold's time and the reason they all give.
func listHolder(st store.Status, now time.Time) (holder, since, reason string) {
	hs := holdersOf(st)
	switch {
	case len(hs) == 0:
		return "-", "-", ""
	case st.Holder == nil:
		holder = holdersCount(hs)
		reason = hs[0].Reason
		for _, h := range hs {
			if h.Reason != reason {
				reason = ""
			}
		}
		return holder, heldFor(hs, now), reason
	}
	h := st.Holder
	holder = h.Name
	if h.PID != 0 { // none is known of an etcd mutex or a lock without a record
		holder = fmt.Sprintf("%s (pid %d)", h.Name, h.PID)
	}
	// etcd does not know when an etcdctl lock was taken: heldFor says "-".
	return holder, heldFor(hs, now), h.Reason
}

// gather reads every key of the store and every resident role the state
// root has seen, as shown, those that shows passes: list's and metrics'
// rows, with lastExits each key's last exit status from its history. A
// missing state root is an empty result with a note.
func gather(ctx context.Context, g *Globals, shows func(store.Status) bool, lastExits bool) ([]statusView, error) {
	var all []store.Status
	backend, err := g.openStore(false)
	var missing *noState
	switch {
	case errors.As(err, &missing):
		missing.note(g.log)
	case err != nil:
		return nil, err
	default:
		defer backend.Close()
		if all, err = backend.List(ctx); err != nil {
			return nil, fail(exitFailed, "%v", err)
		}
		all = append(all, residentRoles(g, backend)...)
	}
	all = slices.DeleteFunc(all, func(st store.Status) bool { return !shows(st) })
	views := make([]statusView, len(all))
	for i, st := range all {
		views[i] = view(st)
		if lastExits && st.Key != "" {
			if hs, err := backend.History(ctx, st.Key, lastExitLook); err == nil {
				views[i].lastExit = lastExitStatus(hs)
			}
		}
	}
	return views, nil
}

// statusView is the JSON shape of CONTRACT.md: a status with its error spelled
// out, and waiters never null.
type statusView struct {
	store.Status
	Waiters   []waiterView   `json:"waiters"`
	Error     string         `json:"error,omitempty"`
	Leftovers *leftoversView `json:"leftovers,omitempty"`
	// Done is a key's done --once IDs, newest first (status only).
	Done []store.Done `json:"done,omitempty"`
	// NeverUsed: free, with no holding in its history (status only).
	NeverUsed bool `json:"never_used,omitempty"`
	// lastExit is the exit status of the last holding whose command ended
	// by itself (metrics only).
	lastExit *int
}

// waiterView is a waiter as JSON shows it: queued since, never "acquired";
// its kind, and with kind slot how many slots it asks for.
type waiterView struct {
	Name   string       `json:"name"`
	PID    int          `json:"pid"`
	Host   string       `json:"host"`
	Kind   store.Kind   `json:"kind"`
	Slots  int          `json:"slots,omitempty"`
	Reason string       `json:"reason,omitempty"`
	Since  time.Time    `json:"since"`
	Build  *store.Build `json:"build,omitempty"`
}

// leftoversView is what a dead holder left running (contract: a free key keeps
// its state, with this beside it).
type leftoversView struct {
	HolderPID int    `json:"holder_pid"`
	Count     int    `json:"count"`
	Cgroup    string `json:"cgroup,omitempty"`
	Error     string `json:"error,omitempty"` // why they could not all be counted
}

func (l *leftoversView) String() string {
	if l.Error != "" {
		return fmt.Sprintf("leftovers: %d processes of dead holder pid %d, and more not counted: %s", l.Count, l.HolderPID, l.Error)
	}
	return fmt.Sprintf("leftovers: %d processes of dead holder pid %d", l.Count, l.HolderPID)
}

// view is st as shown, with what only this host can tell: how many
// processes the holder's cgroup holds, and how many a dead holder left.
func view(st store.Status) statusView {
	v := statusView{Status: st, Waiters: []waiterView{}}
	for _, w := range st.Waiters {
		v.Waiters = append(v.Waiters, waiterView{Kind: w.HoldKind(), Slots: w.Slots, Name: w.Name, PID: w.PID, Host: w.Host, Reason: w.Reason, Since: w.Acquired, Build: w.Build})
	}
	if st.Err != nil {
		v.Error = st.Err.Error()
	}
	// Each holder with its kind, and how many processes its cgroup holds;
	// the exclusive holder is the same one, as shown in holders.
	v.Holders = slices.Clone(holdersOf(st))
	for i := range v.Holders {
		v.Holders[i] = shown(v.Holders[i])
	}
	if x := st.Holder; x != nil {
		i := slices.IndexFunc(v.Holders, func(h store.Holder) bool { return h.Fence == x.Fence && h.PID == x.PID })
		if i < 0 {
			h := shown(*x)
			v.Holder = &h
		} else {
			v.Holder = &v.Holders[i]
		}
	}
	// A dead slot or shared holder's leftovers are shown beside the live
	// holders: its slot's next holder stops them, and until then they run.
	if st.Holder == nil && len(st.Leftovers) > 0 {
		// One that cannot be counted is shown too: the next run, which
		// must stop it first, would fail as this did (never "free" alone
		// while runs are refused).
		if n, err := supervisor.CountTrees(st.Leftovers); n > 0 || err != nil {
			last := st.Leftovers[len(st.Leftovers)-1]
			v.Leftovers = &leftoversView{HolderPID: last.HolderPID, Count: n, Cgroup: last.Cgroup}
			if err != nil {
				v.Leftovers.Error = err.Error()
			}
		}
	}
	return v
}

// shown is h as status shows it: with its kind, and how many processes
// its cgroup holds (only this host can count them).
func shown(h store.Holder) store.Holder {
	h.Kind = h.HoldKind()
	if h.Cgroup != "" {
		h.Processes, _ = supervisor.CountTrees([]store.Leftover{{HolderPID: h.PID, Host: h.Host, Cgroup: h.Cgroup}})
	}
	return h
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printStatus(w io.Writer, v statusView, now time.Time) {
	st := v.Status
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	defer tw.Flush()
	if st.Store != "" {
		fmt.Fprintf(tw, "store:\t%s\n", st.Store)
	} else {
		fmt.Fprintf(tw, "key:\t%s\n", st.Key)
	}
	if v.NeverUsed {
		fmt.Fprintf(tw, "state:\t%s (never used)\n", st.State)
	} else {
		fmt.Fprintf(tw, "state:\t%s\n", st.State)
	}
	if st.Err != nil {
		fmt.Fprintf(tw, "error:\t%s\n", store.Printable(st.Err.Error()))
	}
	if h := st.Holder; h != nil {
		printHolder(tw, h, now)
	} else if len(st.Holders) > 0 {
		printHolders(tw, st.Holders, now)
	}
	if l := v.Leftovers; l != nil {
		fmt.Fprintf(tw, "leftovers:\t%d processes of dead holder pid %d", l.Count, l.HolderPID)
		if l.Cgroup != "" {
			fmt.Fprintf(tw, " in cgroup %s", store.Printable(l.Cgroup))
		}
		if l.Error != "" {
			fmt.Fprintf(tw, ", and more not counted: %s", store.Printable(l.Error))
		}
		fmt.Fprintln(tw)
	}
	printWaiters(tw, st, now)
}

// printHolder writes an exclusive holder, a field a line.
func printHolder(tw io.Writer, h *store.Holder, now time.Time) {
	fmt.Fprintf(tw, "holder:\t%s\n", who(h))
	if h.CommandPID != 0 {
		fmt.Fprintf(tw, "command pid:\t%d\n", h.CommandPID)
	}
	if h.Cgroup != "" {
		fmt.Fprintf(tw, "cgroup:\t%s (%d processes)\n", store.Printable(h.Cgroup), h.Processes)
	}
	if h.Reason != "" {
		fmt.Fprintf(tw, "reason:\t%s\n", store.Printable(h.Reason))
	}
	if !h.Acquired.IsZero() {
		fmt.Fprintf(tw, "acquired:\t%s (%s ago)\n", h.Acquired.Local().Format(time.RFC3339), now.Sub(h.Acquired).Round(time.Second))
	}
	if !h.Expires.IsZero() {
		fmt.Fprintf(tw, "expires:\t%s (%s)\n", h.Expires.Local().Format(time.RFC3339), relative(h.Expires, now))
	}
	if h.Fence != 0 { // fences start at 1: 0 is a holder without a record
		fmt.Fprintf(tw, "fence:\t%d\n", h.Fence)
	}
	if !h.LastTick.IsZero() {
		fmt.Fprintf(tw, "last tick:\t%s (%s ago)\n", h.LastTick.Local().Format(time.RFC3339), now.Sub(h.LastTick).Round(time.Second))
	}
	if b := h.Build; b != nil {
		fmt.Fprintf(tw, "build:\t%s%s, %d bytes%s\n", prefix("", store.Printable(b.Path)+", "), b.ModTime.Format(time.RFC3339), b.Size, orDefault(prefix(", revision ", b.Revision), ""))
	}
	if h.Cancel {
		fmt.Fprintf(tw, "cancel:\trequested\n")
	}
}

// printWaiters writes the waiters in order; each with its kind where the
// key's holders or waiters are not all exclusive.
func printWaiters(tw io.Writer, st store.Status, now time.Time) {
	if len(st.Waiters) == 0 {
		return
	}
	kinds := notAllExclusive(st)
	fmt.Fprintf(tw, "waiters:\t%d\n", len(st.Waiters))
	for i, h := range st.Waiters {
		kind := ""
		if kinds {
			kind = ", " + waitsFor(h)
		}
		fmt.Fprintf(tw, "  %d.\t%s (pid %d on %s), since %s (%s)%s%s\n", i+1, store.Printable(h.Name), h.PID, store.Printable(h.Host),
			h.Acquired.Local().Format(time.RFC3339), ago(h.Acquired, now), kind, prefix(", reason: ", store.Printable(h.Reason)))
	}
}

// ago is how long before now t was; never "in 0s" for a clock read a
// moment before now.
func ago(t, now time.Time) string {
	return max(0, now.Sub(t)).Round(time.Second).String() + " ago"
}

func relative(t, now time.Time) string {
	if d := t.Sub(now).Round(time.Second); d >= 0 {
		return "in " + d.String()
	} else {
		return strings.TrimPrefix(d.String(), "-") + " ago"
	}
}

func prefix(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}
