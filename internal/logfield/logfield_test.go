package logfield

import (
	"syscall"
	"testing"
	"time"
)

func TestFields(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond:               "1.5s",
		1234567 * time.Microsecond:            "1.235s",
		90*time.Second + 400*time.Microsecond: "1m30s",
		0:                                     "0s",
		239220 * time.Nanosecond:              "0.239ms",
		5123456 * time.Nanosecond:             "5.123ms",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
	for sig, want := range map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.Signal(77): "signal 77"} {
		if got := Signal(sig); got != want {
			t.Errorf("Signal(%d) = %q, want %q", sig, got, want)
		}
	}
}
