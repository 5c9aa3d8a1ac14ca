package timingwheel

import (
	"runtime"
	"sync"
	"time"
)

// Clock is the runner's source of the current time. Due times are
// compared with Now().UnixMilli().
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// RunnerConfig configures a Runner. The zero value is usable.
type RunnerConfig struct {
	// Tick is the wheel tick (see Config.Tick).
	Tick time.Duration
	// Clock defaults to the system clock. The runner sleeps with a
	// time.Timer (monotonic), so a test clock must move together with the
	// runtime's timers, e.g. inside a testing/synctest bubble.
	Clock Clock
	// Batch bounds how many entries are taken from the wheel per lock
	// hold; callbacks run after the lock is released. Default 4096.
	Batch int
	// CascadeBatch is the wheel's Config.CascadeBatch: how many entries
	// one step moves down from open buckets ahead of their start. The
	// runner keeps stepping, releasing its lock in between, while such
	// work is pending. Default DefaultCascadeBatch; negative turns it off.
	CascadeBatch int
	// MaxSleep caps one sleep (0: no cap). The runner sleeps on the
	// monotonic clock but due times are wall-clock readings, so a step of
	// the wall clock (either way) is noticed within MaxSleep.
	MaxSleep time.Duration
	// Precise arms a kernel timer (a Linux timerfd) beside the runner's
	// time.Timer, to wake the runtime's poller at the deadline: in an
	// otherwise idle process a time.Timer alone fires up to 1 ms late (the
	// runtime waits for it in epoll_wait, in whole milliseconds), with the
	// timerfd within tens of µs (precise_linux.go). Those tens of µs are
	// taken off too: the timers are armed as much earlier as wake-ups
	// are usually late, and the runner spins (yielding) from its wake-up
	// to the due time — a few µs of CPU per release. The timerfd runs in
	// real time, so it only helps outside a testing/synctest bubble, where
	// it wakes nothing the bubble waits for and a spin would never end.
	// Ignored where there is no timerfd.
	Precise bool
}

type fired struct {
	id  uint64
	due int64
}

// Runner drives a Wheel with one goroutine and one time.Timer (with
// RunnerConfig.Precise, a timerfd beside it wakes an idle runtime): it sleeps
// until the next bucket that has work, is woken early when an earlier
// entry is added, and calls fire for every due entry, in due order, from
// its goroutine. All methods are safe for concurrent use. fire runs
// without the runner's lock held, so it may call Add, Remove and
// Reschedule; a Remove that returns true guarantees fire is not called
// for that entry.
type Runner struct {
	mu      sync.Mutex
	w       *Wheel
	wakeAt  int64 // time the loop sleeps towards; valid if armed
	armed   bool
	batch   []fired
	collect func(id uint64, due int64)

	clock    Clock
	fire     func(id uint64, due int64)
	limit    int
	maxSleep time.Duration
	precise  bool

	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool // guarded by mu
	stopped bool // guarded by mu

	spins int // times the loop spun to a due time (Precise); the loop's own, read after Stop
}

// NewRunner returns a stopped runner that will call fire for due entries.
func NewRunner(cfg RunnerConfig, fire func(id uint64, due int64)) *Runner {
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}
	limit := cfg.Batch
	if limit <= 0 {
		limit = 4096
	}
	r := &Runner{
		w:        New(Config{Tick: cfg.Tick, Start: clock.Now().UnixMilli(), CascadeBatch: cfg.CascadeBatch}),
		clock:    clock,
		fire:     fire,
		limit:    limit,
		maxSleep: cfg.MaxSleep,
		precise:  cfg.Precise,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.collect = func(id uint64, due int64) { r.batch = append(r.batch, fired{id, due}) }
	return r
}

// Start launches the runner's goroutine. Calls after the first, or after
// Stop, are no-ops.
func (r *Runner) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return
	}
	r.started = true
	go r.loop()
}

// Stop stops the goroutine and waits for it to exit, including any fire
// call in progress, so it must not be called from fire. Pending entries
// stay in the wheel. Stop is idempotent.
func (r *Runner) Stop() {
	r.mu.Lock()
	first := !r.stopped
	r.stopped = true
	started := r.started
	r.mu.Unlock()
	if first && started {
		close(r.stop)
	}
	if started {
		<-r.done
	}
}

// Add schedules id at due (unix ms); see Wheel.Add.
func (r *Runner) Add(id uint64, due int64) Handle {
	r.mu.Lock()
	h := r.w.Add(id, due)
	r.poke(due)
	r.mu.Unlock()
	return h
}

// Remove cancels an entry; true means fire will not be called for it.
func (r *Runner) Remove(h Handle) bool {
	r.mu.Lock()
	ok := r.w.Remove(h)
	r.mu.Unlock()
	return ok
}

// Reschedule moves a pending entry; see Wheel.Reschedule.
func (r *Runner) Reschedule(h Handle, due int64) bool {
	r.mu.Lock()
	ok := r.w.Reschedule(h, due)
	if ok {
		r.poke(due)
	}
	r.mu.Unlock()
	return ok
}

// Len returns the number of pending entries.
func (r *Runner) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Len()
}

// NextDue returns the earliest pending due; see Wheel.NextDue.
func (r *Runner) NextDue() (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.NextDue()
}

// poke wakes the loop if due is earlier than what it sleeps towards.
// Removals never poke: waking early for nothing is harmless.
func (r *Runner) poke(due int64) {
	if r.armed && due >= r.wakeAt {
		return
	}
	r.wakeAt, r.armed = due, true
	select {
	case r.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (r *Runner) loop() {
	defer close(r.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	var pt *preciseTimer // Precise: wakes an idle runtime for t
	if r.precise {
		if pt = newPreciseTimer(); pt != nil {
			defer pt.close()
		}
	}
	// With the timerfd: how much earlier than due the timers are armed,
	// the usual lateness of this runner's wake-ups (leadEstimate).
	var lead leadEstimate
	for {
		d, ok := r.step()
		if ok && d <= 0 {
			select {
			case <-r.stop:
				return
			default:
				continue
			}
		}
		if ok && pt != nil && d <= lead.get() {
			r.spins++
			if !r.spin(d) {
				return
			}
			continue
		}
		var tc <-chan time.Time
		var expiry time.Time // when the timers are armed to expire
		if ok {
			sleep := d
			if pt != nil {
				sleep -= lead.get()
				expiry = time.Now().Add(sleep)
				pt.arm(sleep)
			}
			t.Reset(sleep)
			tc = t.C
		}
		select {
		case <-tc:
			if pt != nil {
				lead.observe(time.Since(expiry))
			}
		case <-r.wake:
			t.Stop()
		case <-r.stop:
			t.Stop()
			return
		}
	}
}

// step delivers everything due and returns how long to sleep (ok=false:
// nothing pending, sleep until woken).
func (r *Runner) step() (time.Duration, bool) {
	for {
		r.mu.Lock()
		r.batch = r.batch[:0]
		more := r.w.AdvanceLimit(r.clock.Now().UnixMilli(), r.limit, r.collect)
		next, ok := r.w.wakeAt()
		r.wakeAt, r.armed = next, ok && !more
		r.mu.Unlock()
		for _, f := range r.batch {
			r.fire(f.id, f.due)
		}
		if more {
			continue
		}
		if !ok {
			return 0, false
		}
		// Measured from a fresh reading: delivery above took time. The
		// duration runs on the monotonic clock; on wake-up the clock is
		// read again, so a timer that fires early fires nothing early.
		d := time.UnixMilli(next).Sub(r.clock.Now())
		if r.maxSleep > 0 && d > r.maxSleep {
			d = r.maxSleep
		}
		return d, true
	}
}

// spin waits d on the CPU (yielding to other goroutines), for a due time
// closer than a wake-up from sleep usually takes. It returns early when
// woken (an earlier entry added) and false when stopped.
func (r *Runner) spin(d time.Duration) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-r.stop:
			return false
		case <-r.wake:
			return true
		default:
		}
		runtime.Gosched()
	}
	return true
}

// maxLead bounds leadEstimate, and with it the CPU a runner spends
// spinning before each due time: beyond it a wake-up was held back by a
// busy machine, and spinning longer takes the CPU from whatever keeps it
// busy (a server on Redis, 1,000 releases a second, learnt a lead near a
// 200 µs cap and spent 4–8 % more CPU per message with no better
// median than under this one).
const maxLead = 100 * time.Microsecond

// leadEstimate is how late a Precise runner's wake-ups are, to arm its
// timers that much earlier and spin the rest (Runner.spin). A timerfd's
// expiry reaches the runner's goroutine tens of µs late (the kernel's
// wake-up, then the runtime's: the poller, the timer, the goroutine):
// about 60 µs at the median in a quiet process on the VMs the benchmarks
// ran on, and more with the process busy — a fifth of a release's whole
// median over HTTP. The estimate steps up four times as far when a
// wake-up was later than it as it steps down when one was earlier, so it
// settles where a fifth of the wake-ups are later (the 80th percentile):
// most releases are on time, spinning a few µs each, and a stall moves it
// one step.
type leadEstimate struct{ d time.Duration }

// leadStep is leadEstimate's step down (up: four of them). From zero it
// reaches a typical 60 µs within about ten wake-ups.
const leadStep = 2 * time.Microsecond

func (l *leadEstimate) get() time.Duration { return l.d }

// observe takes one wake-up's lateness, measured from when the timers
// were armed to expire.
func (l *leadEstimate) observe(late time.Duration) {
	if late > l.d {
		l.d = min(l.d+4*leadStep, maxLead)
	} else {
		l.d = max(l.d-leadStep, 0)
	}
}
