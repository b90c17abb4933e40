package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencerun/fencerun/store"
)

// MetricsCmd is `fencerun metrics` (N3).
type MetricsCmd struct {
	Prefix string `arg:"" optional:"" predictor:"key" help:"Only the keys that start with PREFIX (resident stores are shown without one)."`
}

// Help says what the exposition holds and how to feed it to Prometheus.
func (MetricsCmd) Help() string {
	return `Print the Prometheus text exposition format for every key and every resident store the state root has seen, from what list reads, for node_exporter's textfile collector (write it to a temporary name and rename it, as the example does, so the collector never reads half a file).

Every family is a gauge labelled key="KEY" (fencerun_key_*) or store="PATH" (fencerun_resident_*): held (1 or 0), holders (1 for an exclusive hold, up to N with --slots N, any number shared), waiters, fence (while held; of the newest holder), held_seconds (of the longest holder), leftover_processes (of a dead holder, on this host), corrupt, last_exit_status (of the last holding whose command ended by itself, from the history); residents add stuck and last_tick_age_seconds.`
}

// Examples of metrics.
func (MetricsCmd) Examples() string {
	return `  fencerun metrics
  fencerun metrics deploy:
  # cron, every minute, for node_exporter --collector.textfile.directory=/var/lib/node_exporter/textfile
  * * * * * fencerun metrics > /var/lib/node_exporter/textfile/fencerun.prom.$$ && mv /var/lib/node_exporter/textfile/fencerun.prom.$$ /var/lib/node_exporter/textfile/fencerun.prom
`
}

// Validate checks that PREFIX could start a key (B1's characters).
func (m *MetricsCmd) Validate() error {
	if m.Prefix == "" {
		return nil
	}
	return validKey(m.Prefix)
}

// Run prints the exposition.
func (m *MetricsCmd) Run(ctx context.Context, g *Globals) error {
	views, err := gather(ctx, g, func(st store.Status) bool {
		return st.Store != "" || strings.HasPrefix(st.Key, m.Prefix)
	}, true)
	if err != nil {
		return err
	}
	return writeMetrics(os.Stdout, views, time.Now())
}

// family is one metric family: its name after the kind's prefix, its help,
// and its value for a row (false: no sample for that row).
type family struct {
	name, help string
	resident   bool // of resident stores only
	value      func(v statusView, now time.Time) (float64, bool)
}

var families = []family{
	{name: "held", help: "1 while a holder holds it (held, expired or stuck), else 0.",
		value: func(v statusView, _ time.Time) (float64, bool) { return one(len(v.Holders) > 0), true }},
	{name: "holders", help: "How many holders hold it: 1 for an exclusive hold, up to N with --slots N, any number shared.",
		value: func(v statusView, _ time.Time) (float64, bool) { return float64(len(v.Holders)), true }},
	{name: "waiters", help: "How many waiters are queued for it.",
		value: func(v statusView, _ time.Time) (float64, bool) { return float64(len(v.Waiters)), true }},
	{name: "fence", help: "The fencing token of the current holding; of the newest, for many holders.",
		value: func(v statusView, _ time.Time) (float64, bool) {
			var fence uint64
			for _, h := range v.Holders {
				fence = max(fence, h.Fence)
			}
			return float64(fence), fence != 0
		}},
	{name: "held_seconds", help: "Seconds since the current holder acquired it (of many holders, the longest holding); 0 when free.",
		value: func(v statusView, now time.Time) (float64, bool) {
			first := firstAcquired(v.Holders)
			if first.IsZero() {
				return 0, len(v.Holders) == 0
			}
			return max(0, now.Sub(first).Seconds()), true
		}},
	{name: "leftover_processes", help: "Processes a dead holder left running on this host, not yet stopped.",
		value: func(v statusView, _ time.Time) (float64, bool) {
			if v.Leftovers == nil {
				return 0, true
			}
			return float64(v.Leftovers.Count), true
		}},
	{name: "corrupt", help: "1 when its state cannot be read (status names the file), else 0.",
		value: func(v statusView, _ time.Time) (float64, bool) { return one(v.State == store.Corrupt), true }},
	{name: "last_exit_status", help: "The exit status of the last holding whose command ended by itself (128+N for signal N), from the key's history.",
		value: func(v statusView, _ time.Time) (float64, bool) {
			if v.lastExit == nil {
				return 0, false
			}
			return float64(*v.lastExit), true
		}},
	{name: "stuck", help: "1 when the resident ticked and then stopped ticking for --stuck-after, else 0.", resident: true,
		value: func(v statusView, _ time.Time) (float64, bool) { return one(v.State == store.Stuck), true }},
	{name: "last_tick_age_seconds", help: "Seconds since the resident's last tick, when it ticked.", resident: true,
		value: func(v statusView, now time.Time) (float64, bool) {
			if v.Holder == nil || v.Holder.LastTick.IsZero() {
				return 0, false
			}
			return max(0, now.Sub(v.Holder.LastTick).Seconds()), true
		}},
}

// writeMetrics writes the text exposition format (version 0.0.4) of the
// rows: each family's HELP, TYPE and samples together, keys first, then
// resident stores. It is written here rather than by expfmt's encoder,
// which would link protobuf and client_model into every fencerun (3 MB
// of the static binary, and their package initialisation in every run's
// start); the tests check it with expfmt's parser.
func writeMetrics(w io.Writer, views []statusView, now time.Time) error {
	bw := bufio.NewWriter(w)
	for _, kind := range []struct {
		prefix, label string
		resident      bool
	}{{"fencerun_key_", "key", false}, {"fencerun_resident_", "store", true}} {
		for _, f := range families {
			if f.resident && !kind.resident {
				continue
			}
			headed := false
			for _, v := range views {
				name := v.Key
				if kind.resident {
					name = v.Store
				}
				x, ok := f.value(v, now)
				if name == "" || !ok {
					continue
				}
				if !headed {
					fmt.Fprintf(bw, "# HELP %s%s %s\n# TYPE %s%s gauge\n", kind.prefix, f.name, f.help, kind.prefix, f.name)
					headed = true
				}
				fmt.Fprintf(bw, "%s%s{%s=\"%s\"} %s\n", kind.prefix, f.name, kind.label, labelValue(name), strconv.FormatFloat(x, 'g', -1, 64))
			}
		}
	}
	return bw.Flush()
}

// labelValue escapes a label value as the text format asks: backslash,
// double quote and newline; bytes that are not UTF-8 become U+FFFD.
func labelValue(s string) string {
	return labelEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD"))
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
