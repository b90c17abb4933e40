package boottime

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel is CLOCK_BOOTTIME, with timers on timerfd(2) so that the kernel
// wakes the keeper at a deadline, also one that passed while suspended.
type Kernel struct{}

// Now reads CLOCK_BOOTTIME.
func (Kernel) Now() time.Duration { return Now() }

// Now reads CLOCK_BOOTTIME: the default store.Claim.Clock, and Kernel's.
func Now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists on every kernel Go supports; failing here
		// means the process cannot keep time at all.
		panic(fmt.Sprintf("boottime: clock_gettime(CLOCK_BOOTTIME): %v", err))
	}
	return time.Duration(ts.Nano())
}

// NewTimer creates a timerfd on CLOCK_BOOTTIME.
func (Kernel) NewTimer() (Timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("boottime: timerfd_create: %w", err)
	}
	t := &bootTimer{f: os.NewFile(uintptr(fd), "timerfd"), c: make(chan struct{}, 1)}
	go t.read()
	return t, nil
}

type bootTimer struct {
	f *os.File // non-blocking, so reads park in the runtime's poller
	c chan struct{}
}

func (t *bootTimer) read() {
	rc, err := t.f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 8)
	// One RawRead for the timer's life: after each firing read, it waits
	// for the poller's next word instead of reading once more to find the
	// timer empty (EAGAIN), as a loop of Reads would: one system call a
	// renewal less (P4). Between firings the poller's readiness is never
	// reset, so none is missed. It returns once the timer is closed.
	_ = rc.Read(func(fd uintptr) bool {
		switch _, err := unix.Read(int(fd), buf); err {
		case nil:
			select {
			case t.c <- struct{}{}:
			default:
			}
			return false
		case unix.EAGAIN, unix.EINTR:
			return false
		}
		return true // an error that cannot be retried: the timer is done
	})
}

func (t *bootTimer) C() <-chan struct{} { return t.c }

func (t *bootTimer) Set(at time.Duration) { t.SetThen(at, 0) }

func (t *bootTimer) SetThen(at, then time.Duration) {
	select {
	case <-t.c:
	default:
	}
	if at <= 0 {
		at = 1 // an all-zero it_value disarms the timer; 1ns has passed
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(at))}
	if then > at {
		spec.Interval = unix.NsecToTimespec(int64(then - at))
	}
	var err error
	rc, cerr := t.f.SyscallConn()
	if cerr == nil {
		cerr = rc.Control(func(fd uintptr) {
			err = unix.TimerfdSettime(int(fd), unix.TFD_TIMER_ABSTIME, &spec, nil)
		})
	}
	if err = errors.Join(cerr, err); err != nil {
		// Settime fails only on a bad fd or value; neither can happen on an
		// open timer with a positive absolute time.
		panic(fmt.Sprintf("boottime: timerfd_settime: %v", err))
	}
}

func (t *bootTimer) Close() error { return t.f.Close() }
