package boottime

import (
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
)

func TestBootTimerFires(t *testing.T) {
	var c Kernel
	tm, err := c.NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	tm.Set(c.Now() - time.Second) // in the past: fires at once
	testsupport.Recv(t, tm.C(), "a timer set in the past")
	tm.Set(c.Now() + 20*time.Millisecond)
	testsupport.Recv(t, tm.C(), "a timer set 20ms ahead")
	if c.Now() <= 0 {
		t.Error("CLOCK_BOOTTIME reads zero")
	}
}

// SetThen's second firing comes without another setting: the keeper's
// deadline while a renewal is in flight.
func TestBootTimerFiresAgainAtThen(t *testing.T) {
	var c Kernel
	tm, err := c.NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	at := c.Now() + 20*time.Millisecond
	then := at + 200*time.Millisecond
	tm.SetThen(at, then)
	testsupport.Recv(t, tm.C(), "the first firing")
	if c.Now() >= then {
		t.Skip("the first firing was received after the second was due (a loaded machine): both may have been read as one")
	}
	testsupport.Recv(t, tm.C(), "the second firing, without another setting")
	if now := c.Now(); now < then {
		t.Errorf("the second firing came %v before then", then-now)
	}
	// Set replaces both.
	tm.SetThen(c.Now()+time.Hour, c.Now()+2*time.Hour)
	tm.Set(c.Now() + 20*time.Millisecond)
	testsupport.Recv(t, tm.C(), "a timer set 20ms ahead after SetThen")
}
