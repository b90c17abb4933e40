package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/supervisor"
)

// StatusCmd is `fencerun status`.
type StatusCmd struct {
	Key      string `arg:"" optional:"" help:"The key to show."`
	Resident string `placeholder:"PATH" help:"Show the resident role of the store file PATH instead of a key."`
	JSON     bool   `name:"json" help:"Print one JSON object: key or store, state, holder (or null), waiters."`
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
	var st *store.Status
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
		case err != nil:
			return err
		default:
			defer backend.Close()
			st, err = backend.Status(ctx, s.Key)
		}
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrUnsafe) {
				return fail(supervisor.ExitFailed, "%v", err)
			}
			st = &store.Status{Key: s.Key, State: store.Corrupt, Err: err}
		}
	}
	if s.JSON {
		if err := writeJSON(os.Stdout, view(*st)); err != nil {
			return err
		}
	} else {
		printStatus(os.Stdout, *st, time.Now())
	}
	if s.ExitCode {
		return exitCode(map[store.State]int{store.Held: 0, store.Stuck: 0, store.Free: 3, store.Expired: 4, store.Corrupt: 5}[st.State])
	}
	if st.State == store.Corrupt {
		return fail(supervisor.ExitFailed, "%v", st.Err)
	}
	return nil
}

// ListCmd is `fencerun list`.
type ListCmd struct {
	JSON bool `name:"json" help:"Print a JSON array of status objects."`
}

// Run lists every key.
func (l *ListCmd) Run(ctx context.Context, g *Globals) error {
	var all []store.Status
	backend, err := g.openStore(false)
	var missing *noState
	switch {
	case errors.As(err, &missing):
		missing.note(g.log)
	case err != nil:
		return err
	default:
		defer backend.Close()
		if all, err = backend.List(ctx); err != nil {
			return fail(supervisor.ExitFailed, "%v", err)
		}
	}
	if l.JSON {
		views := make([]statusView, len(all))
		for i, st := range all {
			views[i] = view(st)
		}
		return writeJSON(os.Stdout, views)
	}
	now := time.Now()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSTATE\tHOLDER\tHELD-FOR\tWAITERS\tREASON")
	for _, st := range all {
		holder, heldFor, reason := "-", "-", ""
		if h := st.Holder; h != nil {
			holder = fmt.Sprintf("%s (pid %d)", h.Name, h.PID)
			heldFor = now.Sub(h.Acquired).Round(time.Second).String()
			reason = h.Reason
		}
		if st.Err != nil {
			reason = st.Err.Error()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", st.Key, st.State, store.Printable(holder), heldFor, len(st.Waiters), store.Printable(reason))
	}
	return w.Flush()
}

// statusView is the JSON shape of SPEC.md: a status with its error spelled
// out, and waiters never null.
type statusView struct {
	store.Status
	Error string `json:"error,omitempty"`
}

func view(st store.Status) statusView {
	v := statusView{Status: st}
	if v.Waiters == nil {
		v.Waiters = []store.Holder{}
	}
	if st.Err != nil {
		v.Error = st.Err.Error()
	}
	return v
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printStatus(w io.Writer, st store.Status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	defer tw.Flush()
	if st.Store != "" {
		fmt.Fprintf(tw, "store:\t%s\n", st.Store)
	} else {
		fmt.Fprintf(tw, "key:\t%s\n", st.Key)
	}
	fmt.Fprintf(tw, "state:\t%s\n", st.State)
	if st.Err != nil {
		fmt.Fprintf(tw, "error:\t%s\n", store.Printable(st.Err.Error()))
	}
	if h := st.Holder; h != nil {
		fmt.Fprintf(tw, "holder:\t%s (pid %d on %s)\n", store.Printable(h.Name), h.PID, store.Printable(h.Host))
		if h.CommandPID != 0 {
			fmt.Fprintf(tw, "command pid:\t%d\n", h.CommandPID)
		}
		if h.Reason != "" {
			fmt.Fprintf(tw, "reason:\t%s\n", store.Printable(h.Reason))
		}
		fmt.Fprintf(tw, "acquired:\t%s (%s ago)\n", h.Acquired.Format(time.RFC3339), now.Sub(h.Acquired).Round(time.Second))
		if !h.Expires.IsZero() {
			fmt.Fprintf(tw, "expires:\t%s (%s)\n", h.Expires.Format(time.RFC3339), relative(h.Expires, now))
		}
		fmt.Fprintf(tw, "fence:\t%d\n", h.Fence)
		if !h.LastTick.IsZero() {
			fmt.Fprintf(tw, "last tick:\t%s (%s ago)\n", h.LastTick.Format(time.RFC3339), now.Sub(h.LastTick).Round(time.Second))
		}
		if b := h.Build; b != nil {
			fmt.Fprintf(tw, "build:\t%s, %d bytes%s\n", b.ModTime.Format(time.RFC3339), b.Size, orDefault(prefix(", revision ", b.Revision), ""))
		}
		if h.Cancel {
			fmt.Fprintf(tw, "cancel:\trequested\n")
		}
	}
	if len(st.Waiters) > 0 {
		fmt.Fprintf(tw, "waiters:\t%d\n", len(st.Waiters))
		for i, h := range st.Waiters {
			fmt.Fprintf(tw, "  %d.\t%s (pid %d on %s), waiting %s\n", i+1, store.Printable(h.Name), h.PID, store.Printable(h.Host), now.Sub(h.Acquired).Round(time.Second))
		}
	}
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
