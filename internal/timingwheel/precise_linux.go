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
// the AMD VM; see docs/benchmarks-wheel.md). The timerfd's expiry is an
// event for that same epoll_wait, which returns within the kernel's timer
// slack (tens of µs).
type preciseTimer struct {
	fd int
	f  *os.File
	c  chan struct{} // one tick per expiry; stale ticks are harmless
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
	p := &preciseTimer{fd: fd, f: os.NewFile(uintptr(fd), "timingwheel-timerfd"), c: make(chan struct{}, 1)}
	go p.read()
	return p
}

func (p *preciseTimer) read() {
	var buf [8]byte // the expiry count, which the runner does not need
	for {
		if _, err := p.f.Read(buf[:]); err != nil {
			return // closed
		}
		select {
		case p.c <- struct{}{}:
		default:
		}
	}
}

// reset arms the timer to expire once after d. A tick of an earlier
// arming still in the channel is dropped; one the reader has taken but
// not yet sent may still arrive, and only costs the runner a look.
func (p *preciseTimer) reset(d time.Duration) {
	select {
	case <-p.c:
	default:
	}
	// A zero it_value disarms a timerfd: the shortest arming is 1 ns.
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(max(d.Nanoseconds(), 1))}
	_ = unix.TimerfdSettime(p.fd, 0, &its, nil) // cannot fail for a valid fd and value
}

func (p *preciseTimer) close() { _ = p.f.Close() }
