package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// A sample is the values one figure took over its runs, or why it has none.
// Values are in the base unit of the figure: seconds, bytes or per second.
type sample struct {
	vals []float64
	err  error // set: the figure could not be measured, vals are not used
}

func (s *sample) add(v float64) { s.vals = append(s.vals, v) }

// fail records the first reason the figure could not be measured; later
// ones are consequences of it.
func (s *sample) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *sample) ok() bool { return s != nil && s.err == nil && len(s.vals) > 0 }

func (s *sample) median() float64 { return s.quantile(0.5) }

// quantile is the q-quantile by linear interpolation between the closest
// ranks (the method of R's type 7 and numpy's default), so p10 and p90 of
// few values fall between them rather than on the extremes.
func (s *sample) quantile(q float64) float64 {
	if len(s.vals) == 0 {
		return math.NaN()
	}
	v := slices.Clone(s.vals)
	slices.Sort(v)
	pos := q * float64(len(v)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return v[lo] + (v[hi]-v[lo])*(pos-float64(lo))
}

// unit says how a figure's values are printed.
type unit int

const (
	seconds unit = iota // wall or CPU time
	bytes               // memory
	perSec              // a rate
	share               // a fraction of a whole, printed as a percentage
)

func (u unit) format(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	switch u {
	case bytes:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case perSec:
		return fmt.Sprintf("%.0f/s", v)
	case share:
		return fmt.Sprintf("%.1f%%", v*100)
	}
	d := time.Duration(v * float64(time.Second))
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", v*1e3)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", v*1e3)
	default:
		return fmt.Sprintf("%.0f µs", v*1e6)
	}
}

// human prints a configured duration the way the table does: "60 s", "500 ms".
func human(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
	return d.String()
}
