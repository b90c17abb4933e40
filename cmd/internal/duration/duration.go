// Package duration is the value of fencerun's duration flags, read as
// flock(1) and timeout(1) users write them: a Go duration (`90s`,
// `1m30s`) or bare seconds (`5`, `0.5`, `1.5`), and for waits also
// `forever`.
//
// It guarantees that a parsed value is never negative and never over Max (a
// year): a larger value is refused, never wrapped or clamped, whatever its
// spelling (`2562047h47m`, near the largest time.Duration, is refused like
// `9000h`). internal/cli registers Parse as kong's mapper for every
// time.Duration flag and environment variable, so a flag added later gets
// the same reading without asking; a wait that may be `forever` is a Wait.
//
// It does not know which flag it parses: kong prefixes its errors with the
// flag, and the bounds of one flag (a TTL of at least 1s) are that flag's to
// check.
package duration

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Max is the longest duration any flag takes: a year.
const Max = 365 * 24 * time.Hour

// Wait is how long to wait: a duration as Parse reads it, or forever. The zero Wait does not
// wait at all (as flock -w 0).
type Wait struct {
	d       time.Duration
	forever bool
}

// Forever waits without limit.
var Forever = Wait{forever: true}

// For waits at most d.
func For(d time.Duration) Wait { return Wait{d: d} }

// UnmarshalText parses `forever`, a Go duration or bare seconds.
func (w *Wait) UnmarshalText(b []byte) error {
	if string(b) == "forever" {
		*w = Forever
		return nil
	}
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*w = Wait{d: v}
	return nil
}

// Forever reports whether w waits without limit.
func (w Wait) Forever() bool { return w.forever }

// None reports whether w does not wait at all.
func (w Wait) None() bool { return !w.forever && w.d == 0 }

// Limit is the longest w waits; it is meaningless when w is Forever.
func (w Wait) Limit() time.Duration { return w.d }

func (w Wait) String() string {
	if w.forever {
		return "forever"
	}
	return w.d.String()
}

// bareSeconds reports whether s is flock(1)'s and timeout(1)'s form:
// digits with an optional fraction; no sign, no exponent.
func bareSeconds(s string) bool {
	n, rest := number(s)
	return n && rest == ""
}

// goDuration reports whether s has time.ParseDuration's grammar without a
// sign: a string of this shape that ParseDuration still refuses is too
// large. (Scanned by hand, not by a regexp: every run parses its flags,
// and a compiled regexp would cost each start-up more than the parse.)
func goDuration(s string) bool {
	if s == "" {
		return false
	}
	for s != "" {
		ok, rest := number(s)
		if !ok {
			return false
		}
		unit := ""
		for _, u := range []string{"ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h"} {
			if strings.HasPrefix(rest, u) {
				unit = u
				break
			}
		}
		if unit == "" {
			return false
		}
		s = rest[len(unit):]
	}
	return true
}

// number cuts a decimal number (digits, an optional dot, digits; at least
// one digit) off the front of s.
func number(s string) (ok bool, rest string) {
	i, digits, dot := 0, 0, false
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return digits > 0, s[i:]
		}
	}
	return digits > 0, ""
}

const forms = "a Go duration such as 90s or 1m30s, or seconds such as 5 or 0.5"

// Parse reads a Go duration or bare seconds, from 0 to Max.
func Parse(s string) (time.Duration, error) {
	switch {
	case s == "":
		return 0, errors.New("empty duration: give " + forms)
	case s == "forever":
		return 0, errors.New(`"forever" is only for a wait: give ` + forms)
	case strings.HasPrefix(s, "-"):
		return 0, fmt.Errorf("%s: durations are not negative", s)
	}
	// No sign: "+5" is no form flock(1) or timeout(1) users write, and
	// taking it as 5 s would hide a typo (issue 26).
	form := s
	switch {
	case bareSeconds(form):
		form += "s"
	case !goDuration(form):
		return 0, fmt.Errorf("%q is not a duration: give %s", s, forms)
	}
	d, err := time.ParseDuration(form)
	if err != nil || d > Max {
		// The shape is right, so ParseDuration failed on its size.
		return 0, fmt.Errorf("%s is over the limit of a year (8760h)", s)
	}
	return d, nil
}
