package timingwheel

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// preciseTimer is a one-shot timer on a Linux timerfd, read through the
// runtime's network poller. A time.Timer fires when the runtime next looks
// at its timers, and a process with nothing else to do looks from
// epoll_wait, whose timeout is in whole milliseconds: the runtime rounds a
// sleep down to the millisecond and anything under one up to one, so an
// idle server's timer fires 0–1 ms late (about 0.6 ms at the median on
// the AMD VM; docs/benchmarks-wheel.md). The timerfd's expiry is an event
// for that same epoll_wait, which returns within the kernel's timer slack
// (tens of µs). The runner's goroutine reads it itself: handing each
// expiry over from a reader goroutine cost more CPU per wake-up than the
// time.Timer did.
type preciseTimer struct {
	fd int
	f  *os.File
}

// newPreciseTimer returns nil when the kernel refuses a timerfd; the
// runner then sleeps on a time.Timer.
func newPreciseTimer() *preciseTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	// Non-blocking, so os.NewFile registers it with the poller: a Read
	// parks the goroutine, not a thread.
	return &preciseTimer{fd: fd, f: os.NewFile(uintptr(fd), "timingwheel-timerfd")}
}

// arm makes the timer expire once after d (at least 1 ns: a zero value
// disarms a timerfd), replacing any earlier arming and forgetting an
// expiry not yet read; disarm stops it.
func (p *preciseTimer) arm(d time.Duration) {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(max(d.Nanoseconds(), 1))}
	_ = unix.TimerfdSettime(p.fd, 0, &its, nil) // cannot fail for a valid fd and value
}

func (p *preciseTimer) disarm() {
	_ = unix.TimerfdSettime(p.fd, 0, &unix.ItimerSpec{}, nil)
}

// wait blocks until the timer expires.
func (p *preciseTimer) wait() {
	var buf [8]byte // the expiry count, which the runner does not need
	_, _ = p.f.Read(buf[:])
}

func (p *preciseTimer) close() { _ = p.f.Close() }
