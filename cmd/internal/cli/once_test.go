package cli

import (
	"testing"
	"time"
)

// O2: the ID of --once-per D is the UTC start of the current period,
// floor(unix seconds / D) * D, whatever the local zone.
func TestOncePerID(t *testing.T) {
	now := time.Date(2026, 12, 4, 21, 39, 20, 500_000_000, time.FixedZone("CET", 3600))
	for _, c := range []struct {
		per  time.Duration
		want string
	}{
		{2 * time.Second, "2026-12-04T20:39:20Z"},
		{time.Hour, "2026-12-04T20:00:00Z"},
		{24 * time.Hour, "2026-12-04T00:00:00Z"},
		{7 * time.Minute, time.Unix(now.Unix()/420*420, 0).UTC().Format(time.RFC3339)},
		{0, "given"},
	} {
		r := RunCmd{Once: "given", OncePer: c.per}
		if c.per != 0 {
			r.Once = ""
		}
		if got := r.onceID(now); got != c.want {
			t.Errorf("--once-per %v at %v = %s, want %s", c.per, now, got, c.want)
		}
	}
}
