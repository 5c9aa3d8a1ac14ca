package timingwheel

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// preciseTimer wakes the runtime's network poller at a deadline, so that
// the runner's time.Timer fires on time in an otherwise idle process.
//
// The runtime runs its timers when a P looks for work: a busy process
// fires a time.Timer promptly, but an idle one waits for it in
// epoll_wait, whose timeout is in whole milliseconds (a sleep is rounded
// down to the millisecond and anything under one up to one), so the timer
// fires 0–1 ms late: 0.6 ms at the median on the AMD VM
// (docs/benchmarks-wheel.md). A timerfd registered with the same poller
// (os.NewFile of a non-blocking fd) expires within the kernel's timer
// slack, which ends that epoll_wait; the woken P then runs the due timer.
// Nobody reads the timerfd: the poller registers it edge-triggered, so
// each expiry wakes it once, and each arming resets it.
//
// Reading the timerfd in the runner's goroutine instead, in place of the
// time.Timer, was as precise when idle, but under load the poller is only
// consulted when a P runs out of work, and the tail of releases grew.
type preciseTimer struct {
	fd int
	f  *os.File // keeps fd open and registered with the poller
}

// newPreciseTimer returns nil when the kernel refuses a timerfd; the
// runner then sleeps on its time.Timer alone.
func newPreciseTimer() *preciseTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	return &preciseTimer{fd: fd, f: os.NewFile(uintptr(fd), "timingwheel-timerfd")}
}

// arm makes the timer expire once after d (at least 1 ns: a zero value
// disarms a timerfd), replacing any earlier arming.
func (p *preciseTimer) arm(d time.Duration) {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(max(d.Nanoseconds(), 1))}
	_ = unix.TimerfdSettime(p.fd, 0, &its, nil) // cannot fail for a valid fd and value
}

func (p *preciseTimer) close() { _ = p.f.Close() }
