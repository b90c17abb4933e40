package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fencerun/fencerun/store"
)

// manyHeld is a key held in 3 of 4 slots, with a slot waiter behind.
func manyHeld(now time.Time) store.Status {
	slot := func(i int, name string, fence uint64, age time.Duration) store.Holder {
		return store.Holder{Kind: store.KindSlot, Slot: ptr(i), Slots: 4, Name: name, PID: 100 + i, Host: "h",
			Acquired: now.Add(-age), Expires: now.Add(time.Minute), Fence: fence, Reason: "nightly"}
	}
	return store.Status{Key: "builds", State: store.Held,
		Holders: []store.Holder{slot(0, "a", 7, 3*time.Second), slot(1, "b", 9, time.Second), slot(3, "c", 5, 90*time.Second)},
		Waiters: []store.Holder{{Kind: store.KindSlot, Slots: 4, Name: "w", PID: 200, Host: "h", Acquired: now}}}
}

// M3: a key of many holders shows every holder (slot, pid, fence, age)
// and each waiter's kind; JSON keeps holder null and gains holders.
func TestManyHoldersShown(t *testing.T) {
	now := time.Now()
	v := view(manyHeld(now))
	var text bytes.Buffer
	printStatus(&text, v, now)
	for _, want := range []string{"holders: 3 of 4 slots", "slot 0: a (pid 100 on h), fence 7, held for 3s", "slot 3: c (pid 103 on h), fence 5, held for 1m30s",
		"w (pid 200 on h), since", "one of 4 slots"} {
		if !strings.Contains(squeeze(text.String()), want) {
			t.Errorf("status does not say %q:\n%s", want, text.String())
		}
	}
	var doc struct {
		Holder  *store.Holder `json:"holder"`
		Holders []struct {
			Kind  string `json:"kind"`
			Slot  *int   `json:"slot"`
			PID   int    `json:"pid"`
			Fence uint64 `json:"fence"`
		} `json:"holders"`
		Waiters []struct {
			Kind  string `json:"kind"`
			Slots int    `json:"slots"`
		} `json:"waiters"`
	}
	var js bytes.Buffer
	writeJSON(&js, v)
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Holder != nil || len(doc.Holders) != 3 || doc.Holders[2].Kind != "slot" || doc.Holders[2].Slot == nil || *doc.Holders[2].Slot != 3 ||
		doc.Holders[2].Fence != 5 || len(doc.Waiters) != 1 || doc.Waiters[0].Kind != "slot" || doc.Waiters[0].Slots != 4 {
		t.Errorf("status --json:\n%s", js.String())
	}
	holder, since, reason := listHolder(v.Status, now)
	if holder != "3 of 4 slots" || since != "1m30s" || reason != "nightly" {
		t.Errorf("list row: %q %q %q", holder, since, reason)
	}
}

// An exclusive holder is shown as always, and is in holders too; a free
// key's holders is an empty array, never null. A backend that fills only
// Holder (a resident role) gets holders from it.
func TestExclusiveHolderShown(t *testing.T) {
	now := time.Now()
	h := &store.Holder{Name: "x", PID: 5, Host: "h", Fence: 3, Acquired: now}
	for _, st := range []store.Status{
		{Key: "k", State: store.Held, Holder: h},
		{Key: "k", State: store.Held, Holder: h, Holders: []store.Holder{*h}},
	} {
		var js bytes.Buffer
		writeJSON(&js, view(st))
		var doc map[string]any
		json.Unmarshal(js.Bytes(), &doc)
		hs, _ := doc["holders"].([]any)
		holder, _ := doc["holder"].(map[string]any)
		if holder == nil || holder["kind"] != "exclusive" || len(hs) != 1 || hs[0].(map[string]any)["fence"] != 3.0 {
			t.Errorf("status --json of an exclusive hold:\n%s", js.String())
		}
		var text bytes.Buffer
		printStatus(&text, view(st), now)
		if !strings.Contains(squeeze(text.String()), "holder: x (pid 5 on h)") || strings.Contains(text.String(), "holders:") {
			t.Errorf("status of an exclusive hold:\n%s", text.String())
		}
	}
	var js bytes.Buffer
	writeJSON(&js, view(store.Status{Key: "k", State: store.Free}))
	if !strings.Contains(js.String(), `"holders": []`) || !strings.Contains(js.String(), `"holder": null`) {
		t.Errorf("status --json of a free key:\n%s", js.String())
	}
}

// Shared holders are counted in list, and waiters of both kinds are
// shown with theirs.
func TestSharedHoldersShown(t *testing.T) {
	now := time.Now()
	st := store.Status{Key: "snap", State: store.Held,
		Holders: []store.Holder{{Kind: store.KindShared, Name: "r1", PID: 1, Fence: 4, Acquired: now}, {Kind: store.KindShared, Name: "r2", PID: 2, Fence: 6, Acquired: now}},
		Waiters: []store.Holder{{Kind: store.KindExclusive, Name: "w", PID: 3}, {Kind: store.KindShared, Name: "r3", PID: 4}}}
	if holder, _, _ := listHolder(st, now); holder != "2 shared" {
		t.Errorf("list's HOLDER of two shared holders: %q", holder)
	}
	var text bytes.Buffer
	printStatus(&text, view(st), now)
	for _, want := range []string{"holders: 2 shared", "shared: r1 (pid 1 on ), fence 4", "w (pid 3 on ), since", ", exclusive", ", shared"} {
		if !strings.Contains(squeeze(text.String()), want) {
			t.Errorf("status does not say %q:\n%s", want, text.String())
		}
	}
}

// N3: fencerun_key_holders counts every holder; the fence is the
// newest's and held_seconds the longest holding's, as Prometheus's
// parser reads them.
func TestMetricsOfManyHolders(t *testing.T) {
	now := time.Now()
	var out bytes.Buffer
	if err := writeMetrics(&out, []statusView{view(manyHeld(now)), view(store.Status{Key: "free", State: store.Free})}, now); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&out)
	if err != nil {
		t.Fatal(err)
	}
	value := func(fam, key string) (float64, bool) {
		f := fams[fam]
		if f == nil {
			return 0, false
		}
		for _, m := range f.Metric {
			if m.Label[0].GetValue() == key {
				return m.Gauge.GetValue(), true
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		fam, key string
		want     float64
	}{
		{"fencerun_key_holders", "builds", 3}, {"fencerun_key_holders", "free", 0},
		{"fencerun_key_held", "builds", 1}, {"fencerun_key_held", "free", 0},
		{"fencerun_key_fence", "builds", 9}, {"fencerun_key_waiters", "builds", 1},
	} {
		if got, ok := value(c.fam, c.key); !ok || got != c.want {
			t.Errorf("%s{key=%q} = %v (present %v), want %v", c.fam, c.key, got, ok, c.want)
		}
	}
	if s, ok := value("fencerun_key_held_seconds", "builds"); !ok || s < 90 {
		t.Errorf("fencerun_key_held_seconds{key=builds} = %v, want the longest holding's 90s", s)
	}
}

// squeeze is s with each run of spaces one space: tabwriter's padding
// is not what the tests check.
func squeeze(s string) string {
	return regexp.MustCompile(` +`).ReplaceAllString(s, " ")
}
