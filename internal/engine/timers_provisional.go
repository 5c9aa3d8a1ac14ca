package engine

import (
	"sync"
	"time"

	"github.com/delayq/delayq/internal/clock"
)

// afterFuncTimers is a stand-in until the timing wheel's runner is wired.
type afterFuncTimers struct {
	clk  clock.Clock
	fire func(uint64)
	mu   sync.Mutex
	t    map[uint64]*time.Timer
	done bool
}

func newWheelTimers(clk clock.Clock, fire func(uint64)) timers {
	return &afterFuncTimers{clk: clk, fire: fire, t: map[uint64]*time.Timer{}}
}

func (a *afterFuncTimers) Set(id uint64, due int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return
	}
	if old := a.t[id]; old != nil {
		old.Stop()
	}
	d := time.Duration(due-a.clk.Now().UnixMilli()) * time.Millisecond
	if d > maxSleep {
		// Re-read the wall clock at least every maxSleep so a forward step
		// of the clock releases what it made due.
		a.t[id] = time.AfterFunc(maxSleep, func() { a.Set(id, due) })
		return
	}
	a.t[id] = time.AfterFunc(max(d, 0), func() { a.fire(id) })
}

const maxSleep = time.Second

func (a *afterFuncTimers) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = true
	for _, t := range a.t {
		t.Stop()
	}
}
