package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricsOf parses `fencerun metrics ARGS` with Prometheus's own parser of
// the text format.
func metricsOf(t *testing.T, state string, args ...string) map[string]*dto.MetricFamily {
	t.Helper()
	out, err := fencerun(state, append([]string{"metrics"}, args...)...).Output()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		// Debian's prometheus package: the README's check, where it is installed.
		check := exec.Command(promtool, "check", "metrics")
		check.Stdin = bytes.NewReader(out)
		if msg, err := check.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, msg)
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, out)
	}
	return fams
}

// gauge is the value of family name's sample labelled label=value.
func gauge(fams map[string]*dto.MetricFamily, name, label, value string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	if f.GetType() != dto.MetricType_GAUGE {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// `fencerun metrics` is the Prometheus text format, as Prometheus's parser
// reads it, for every key (held, holders, waiters, fence, held seconds,
// leftovers, corrupt) and every resident store, whose path is escaped as a
// label value (N3).
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	for _, k := range []string{"free", "bad"} {
		if out, err := fencerun(state, "run", "--key", k, "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "keys", "k-bad", "lease"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	holder := fencerun(state, "run", "--key", "busy", "--", "sh", "-c", `touch "$0"; exec sleep 60`, filepath.Join(dir, "held"))
	waiter := fencerun(state, "run", "--key", "busy", "--", "true")
	weird := filepath.Join(dir, `we"ird\dir`)
	os.Mkdir(weird, 0o700)
	store := filepath.Join(weird, "app.db")
	res := fencerun(state, "run", "--resident", store, "--", "sh", "-c", `touch "$0"; exec sleep 60`, filepath.Join(dir, "resident"))
	for _, c := range append([]*exec.Cmd{holder}, waiter, res) {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { endRun(c.Process); c.Wait() }()
		if c == holder {
			waitFile(t, filepath.Join(dir, "held"))
		}
	}
	waitFile(t, filepath.Join(dir, "resident"))
	if err := waitFor(func() bool {
		out, _ := fencerun(state, "status", "busy").Output()
		return strings.Contains(string(out), "waiters:")
	}); err != nil {
		t.Fatal("the waiter never queued")
	}

	fams := metricsOf(t, state)
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"fencerun_key_held", "key", "busy", 1}, {"fencerun_key_held", "key", "free", 0},
		{"fencerun_key_holders", "key", "busy", 1}, {"fencerun_key_waiters", "key", "busy", 1},
		{"fencerun_key_waiters", "key", "free", 0}, {"fencerun_key_corrupt", "key", "bad", 1},
		{"fencerun_key_corrupt", "key", "busy", 0}, {"fencerun_key_leftover_processes", "key", "busy", 0},
		{"fencerun_resident_held", "store", store, 1}, {"fencerun_resident_waiters", "store", store, 0},
		{"fencerun_key_last_exit_status", "key", "free", 0},
	} {
		if got, ok := gauge(fams, c.name, c.label, c.value); !ok || got != c.want {
			t.Errorf("%s{%s=%q} = %v (present %v), want %v", c.name, c.label, c.value, got, ok, c.want)
		}
	}
	if f, ok := gauge(fams, "fencerun_key_fence", "key", "busy"); !ok || f < 1 {
		t.Errorf("fencerun_key_fence{key=busy} = %v (present %v), want the holder's fence", f, ok)
	}
	if _, ok := gauge(fams, "fencerun_key_last_exit_status", "key", "busy"); ok {
		t.Error("a key whose only holding runs has a last exit status")
	}
	if _, ok := gauge(fams, "fencerun_key_fence", "key", "free"); ok {
		t.Error("a free key has a fence gauge")
	}
	if s, ok := gauge(fams, "fencerun_key_held_seconds", "key", "busy"); !ok || s <= 0 {
		t.Errorf("fencerun_key_held_seconds{key=busy} = %v (present %v), want > 0", s, ok)
	}
	if s, ok := gauge(fams, "fencerun_resident_held_seconds", "store", store); !ok || s <= 0 {
		t.Errorf("fencerun_resident_held_seconds = %v (present %v), want > 0", s, ok)
	}

	// A prefix keeps only its keys.
	fams = metricsOf(t, state, "bu")
	if _, ok := gauge(fams, "fencerun_key_held", "key", "free"); ok {
		t.Error("metrics bu shows the key free")
	}
	if _, ok := gauge(fams, "fencerun_key_held", "key", "busy"); !ok {
		t.Error("metrics bu does not show the key busy")
	}
}
