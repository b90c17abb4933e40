// Package logfield formats the values of fencerun's structured log fields
// so that they read the same in text and in JSON: durations as strings
// like "1.5s" (not nanoseconds), signals by name ("SIGTERM", not
// "terminated" or 15).
//
// It guarantees nothing about the logs themselves: which lines are logged,
// and with which fields, is each caller's.
package logfield

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Duration is d rounded to the millisecond, as time.Duration prints it.
func Duration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// Signal is sig's name, SIGTERM; a number without one reads "signal 42".
func Signal(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return sig.String()
}
