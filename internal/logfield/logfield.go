// Package logfield formats the values of fencerun's structured log fields
// so that they read the same in text and in JSON: durations as strings
// like "1.5s" (not nanoseconds), signals by name ("SIGTERM", not
// "terminated" or 15).
//
// It guarantees nothing about the logs themselves: which lines are logged,
// and with which fields, is each caller's.
package logfield

import (
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Duration is d as time.Duration prints it, rounded to the millisecond
// from a second up and to the microsecond below; under a millisecond in
// milliseconds ("0.25ms", not "250µs"), so that the text stays ASCII and
// unquoted, and time.ParseDuration still reads it.
func Duration(d time.Duration) string {
	switch a := max(d, -d); {
	case a < time.Millisecond && a != 0:
		return strconv.FormatFloat(float64(d.Round(time.Microsecond))/1e6, 'f', -1, 64) + "ms"
	case a < time.Second:
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// Signal is sig's name, SIGTERM; a number without one reads "signal 42".
func Signal(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return sig.String()
}
