package engine

import (
	"sync"
	"time"

	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/timingwheel"
)

// maxSleep caps the runner's sleeps. It sleeps on the monotonic clock but
// due times are wall-clock readings, so a step of the wall clock (either
// way) is noticed, and what it made due released, within maxSleep.
const maxSleep = time.Second

// wheelTimers adapts the timing wheel's runner to the dispatcher: one entry
// per id, moved rather than duplicated when re-armed.
type wheelTimers struct {
	fire func(uint64)
	r    *timingwheel.Runner

	mu      sync.Mutex
	handles map[uint64]entry
}

type entry struct {
	h   timingwheel.Handle
	due int64
}

func newWheelTimers(clk clock.Clock, precise bool, fire func(uint64)) timers {
	w := &wheelTimers{fire: fire, handles: make(map[uint64]entry)}
	w.r = timingwheel.NewRunner(timingwheel.RunnerConfig{Clock: clk, MaxSleep: maxSleep, Precise: precise}, w.onFire)
	w.r.Start()
	return w
}

// Set implements timers.
func (w *wheelTimers) Set(id uint64, due int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.handles[id]; ok && w.r.Reschedule(e.h, due) {
		w.handles[id] = entry{e.h, due}
		return
	}
	w.handles[id] = entry{w.r.Add(id, due), due}
}

func (w *wheelTimers) onFire(id uint64, due int64) {
	w.mu.Lock()
	// Forget the entry only if it is the one that fired: a Set racing
	// this callback may already have armed a new one.
	if e, ok := w.handles[id]; ok && e.due == due {
		delete(w.handles, id)
	}
	w.mu.Unlock()
	w.fire(id)
}

// Stop implements timers.
func (w *wheelTimers) Stop() { w.r.Stop() }
