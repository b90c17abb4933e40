package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/cmd/internal/duration"
	"github.com/fencerun/fencerun/store"
)

// HistoryCmd is `fencerun history` (N2).
type HistoryCmd struct {
	Key   string `arg:"" predictor:"key" help:"The key whose holdings to show."`
	JSON  bool   `name:"json" help:"Print a JSON array of holdings: fence, slot, name, pid, host, reason, start, end, ending {how, exit_status, signal, by}."`
	Limit int    `placeholder:"N" help:"Show only the last N holdings."`
	Since string `placeholder:"T" help:"Show only holdings that ended at or after T (still running ones too): an RFC 3339 time (2026-12-04T14:00:00Z), or a duration before now (90m, 2h)."`

	since time.Time
}

// Help says what is kept.
func (HistoryCmd) Help() string {
	return `Each holding of KEY, oldest first: its fence, slot (with --slots), holder (name, pid, host), reason, start, end, and how it ended: the command's exit status or signal, lost (not renewed in time), revoked (by whom), cancelled, timeout, handed over, stuck, killed (fencerun got a fatal signal), not started, or "unknown (holder died)" for a holder that died holding the lease, once the next one took it. The last 1,000 holdings of each key are kept, never more, on both backends; prune keeps them, prune --history drops those of free keys.`
}

// Examples of history.
func (HistoryCmd) Examples() string {
	return `  fencerun history deploy:prod
  fencerun history deploy:prod --since 2h --json
  fencerun history nightly --limit 10
`
}

// Validate checks the key, the limit and the time.
func (h *HistoryCmd) Validate() error {
	if h.Limit < 0 {
		return usage("--limit %d is negative", h.Limit)
	}
	if h.Since != "" {
		t, err := time.Parse(time.RFC3339, h.Since)
		if err != nil {
			d, derr := duration.Parse(h.Since)
			if derr != nil {
				return usage("--since %s: give an RFC 3339 time (2026-12-04T14:00:00Z) or a duration before now (90m)", h.Since)
			}
			t = time.Now().Add(-d)
		}
		h.since = t
	}
	return validKey(h.Key)
}

// Run prints the holdings.
func (h *HistoryCmd) Run(ctx context.Context, g *Globals) error {
	var hs []store.Holding
	backend, err := g.openStore(false)
	var missing *noState
	switch {
	case errors.As(err, &missing):
		missing.note(g.log)
	case err != nil:
		return err
	default:
		defer backend.Close()
		limit := h.Limit
		if !h.since.IsZero() {
			limit = 0 // --since filters by time: read them all
		}
		if hs, err = backend.History(ctx, h.Key, limit); err != nil {
			return fail(exitFailed, "%v", err)
		}
	}
	hs = h.filter(hs)
	if h.JSON {
		if hs == nil {
			hs = []store.Holding{}
		}
		return writeJSON(os.Stdout, hs)
	}
	if len(hs) == 0 {
		fmt.Printf("no holdings of %s\n", h.Key)
		return nil
	}
	bw := bufio.NewWriter(os.Stdout)
	w := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	// A SLOT column where a holding was in a slot (--slots): "-" for
	// the others.
	slots := slices.ContainsFunc(hs, func(x store.Holding) bool { return x.Slot != nil })
	header := "FENCE\tSTART\tEND\tHOLDER\tENDED\tREASON"
	if slots {
		header = "FENCE\tSLOT\tSTART\tEND\tHOLDER\tENDED\tREASON"
	}
	fmt.Fprintln(w, header)
	for _, x := range hs {
		end := "-"
		if !x.End.IsZero() {
			end = x.End.Local().Format(time.RFC3339)
		}
		fence := strconv.FormatUint(x.Fence, 10)
		switch {
		case slots && x.Slot != nil:
			fence += "\t" + strconv.Itoa(*x.Slot)
		case slots:
			fence += "\t-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", fence, x.Start.Local().Format(time.RFC3339), end,
			who(&store.Holder{Name: x.Name, PID: x.PID, Host: x.Host}), store.Printable(endedText(x.Ending)), store.Printable(x.Reason))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

// filter keeps what --since and --limit ask for.
func (h *HistoryCmd) filter(hs []store.Holding) []store.Holding {
	if !h.since.IsZero() {
		var kept []store.Holding
		for _, x := range hs {
			if x.Ending == nil || x.End.IsZero() && !x.Start.Before(h.since) || !x.End.Before(h.since) {
				kept = append(kept, x)
			}
		}
		hs = kept
	}
	if h.Limit > 0 && len(hs) > h.Limit {
		hs = hs[len(hs)-h.Limit:]
	}
	return hs
}

// endedText says how a holding ended, in a word or a few.
func endedText(e *store.Ending) string {
	switch {
	case e == nil:
		return "holding"
	case e.How == store.EndExited && e.ExitStatus != nil:
		return "exit " + strconv.Itoa(*e.ExitStatus)
	case e.How == store.EndSignal, e.How == store.EndKilled && e.Signal != "", e.How == store.EndNotStarted && e.Signal != "":
		return string(e.How) + " " + e.Signal
	case e.How == store.EndRevoked && e.By != "":
		return "revoked by " + e.By
	}
	return string(e.How)
}

// lastExitLook is how many of a key's newest holdings metrics reads for
// the last exit status: a history chunk's worth, not every key's whole
// history.
const lastExitLook = 50

// lastExitStatus is the exit status of the last holding of hs whose
// command ended by itself: its own, or 128+N for a signal N; nil if none.
func lastExitStatus(hs []store.Holding) *int {
	for i := len(hs) - 1; i >= 0; i-- {
		e := hs[i].Ending
		switch {
		case e == nil:
		case e.How == store.EndExited && e.ExitStatus != nil:
			return e.ExitStatus
		case e.How == store.EndSignal:
			if n := unix.SignalNum(e.Signal); n != 0 {
				s := 128 + int(n)
				return &s
			}
		}
	}
	return nil
}
