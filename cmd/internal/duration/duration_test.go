package duration

import (
	"strings"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string // a substring of the error; "" for none
	}{
		{in: "5", want: 5 * time.Second},
		{in: "0", want: 0},
		{in: "0.5", want: 500 * time.Millisecond},
		{in: "1.5", want: 1500 * time.Millisecond},
		{in: ".25", want: 250 * time.Millisecond},
		{in: "5.", want: 5 * time.Second},
		{in: "+3", err: "not a duration"},
		{in: "+5s", err: "not a duration"},
		{in: "90s", want: 90 * time.Second},
		{in: "1m30s", want: 90 * time.Second},
		{in: "1.5h", want: 90 * time.Minute},
		{in: "300ms", want: 300 * time.Millisecond},
		{in: "5\u00b5s", want: 5 * time.Microsecond},
		{in: "1h2m3.5s", want: time.Hour + 2*time.Minute + 3500*time.Millisecond},
		{in: "8760h", want: Max},
		{in: "31536000", want: Max},
		{in: "8760h1ns", err: "over the limit of a year (8760h)"},
		{in: "31536000.5", err: "over the limit of a year"},
		{in: "9000h", err: "over the limit of a year"},
		{in: "2562047h47m", err: "over the limit of a year"}, // fits a time.Duration
		{in: "2562048h", err: "over the limit of a year"},    // does not
		{in: "99999999999999999999", err: "over the limit of a year"},
		{in: "-1", err: "-1: durations are not negative"},
		{in: "-5s", err: "negative"},
		{in: "", err: "empty duration"},
		{in: "forever", err: `"forever" is only for a wait`},
		{in: "1e3", err: "not a duration"},
		{in: "5x", err: "not a duration"},
		{in: "inf", err: "not a duration"},
		{in: "0x10", err: "not a duration"},
		{in: "1 s", err: "not a duration"},
		{in: "s", err: "not a duration"},
		{in: ".", err: "not a duration"},
		{in: "1.5.5", err: "not a duration"},
		{in: "1.5.5s", err: "not a duration"},
		{in: "1h2", err: "not a duration"},
	} {
		d, err := Parse(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && d != tc.want:
			t.Errorf("%q = %v, want %v", tc.in, d, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
		}
	}
}

func TestWait(t *testing.T) {
	for _, tc := range []struct {
		in            string
		forever, none bool
		limit         time.Duration
		err           string
	}{
		{in: "forever", forever: true},
		{in: "0", none: true},
		{in: "0s", none: true},
		{in: "5", limit: 5 * time.Second},
		{in: "1m", limit: time.Minute},
		{in: "2562047h47m", err: "over the limit of a year"},
		{in: "Forever", err: "not a duration"},
	} {
		var w Wait
		err := w.UnmarshalText([]byte(tc.in))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case w.Forever() != tc.forever || w.None() != tc.none || (!tc.forever && w.Limit() != tc.limit):
			t.Errorf("%q = %+v, want forever %v, none %v, limit %v", tc.in, w, tc.forever, tc.none, tc.limit)
		}
	}
	if (Wait{}).String() != "0s" || Forever.String() != "forever" || For(time.Second).String() != "1s" {
		t.Errorf("String: %q %q %q", Wait{}.String(), Forever.String(), For(time.Second).String())
	}
}
