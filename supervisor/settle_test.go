package supervisor

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// A signal the kernel gave this process before settleSignals is in its
// os/signal channel when settleSignals returns: what suspend relies on to
// forward bash's SIGTERM before it continues the command (the kill of a
// stopped job). Without the settling, a look right after the kill finds
// the channel empty most times: os/signal's delivery is asynchronous.
func TestSettledSignalsAreInTheirChannels(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGHUP} {
		got := make(chan os.Signal, 1)
		cont := make(chan os.Signal, 1)
		signal.Notify(got, sig)
		signal.Notify(cont, syscall.SIGCONT)
		for i := range 50 {
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			settleSignals(cont)
			if len(got) != 1 {
				t.Fatalf("%v, try %d: not in its channel after settleSignals", sig, i)
			}
			<-got
		}
		signal.Stop(got)
		signal.Stop(cont)
	}
	if signalsInFlight() {
		t.Error("a signal is in flight with none sent")
	}
}
