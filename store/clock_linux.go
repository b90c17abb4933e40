package store

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// BootTime reads CLOCK_BOOTTIME, which keeps counting while the system is
// suspended: the default Claim.Clock, and the clock of fence.BootClock.
func BootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists on every kernel Go supports; failing here
		// means the process cannot keep time at all.
		panic(fmt.Sprintf("store: clock_gettime(CLOCK_BOOTTIME): %v", err))
	}
	return time.Duration(ts.Nano())
}
