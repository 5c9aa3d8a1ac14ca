package engine

import (
	"context"
	"runtime/trace"
	"sync"
)

// timers is what the dispatcher needs from the timing wheel's runner: one
// pending fire time per id, and a callback when it comes.
type timers interface {
	// Set (re)arms id to fire at due (Unix ms); it replaces an earlier setting.
	Set(id uint64, due int64)
	// Stop ends the runner and waits for its goroutine.
	Stop()
}

const (
	expireID      uint64 = 1 // the lease-expiry sweep's wheel entry
	firstTopicID  uint64 = 2
	expireGrain          = 100 // ms; expiry sweeps are coalesced to this grain
	workers              = 4
	retryAfterErr        = 1000 // ms before a failed promotion or sweep is retried
)

// dispatcher arms wheel entries and, when they come due, dispatches the due
// work (promotion, lease expiry, recurring schedules' ticks) to a small pool
// of workers, so a slow store call never delays the wheel's other timers.
// It owns its goroutines.
type dispatcher struct {
	e  *Engine
	tm timers

	mu    sync.Mutex
	armed map[uint64]int64 // id → due it is armed for; absent when idle
	byID  map[uint64]*topic
	// Recurring schedules: one wheel entry per schedule name, from the
	// same id space as topics.
	schedID   map[string]uint64
	schedName map[uint64]string
	nextID    uint64
	// pending holds the jobs queued, to coalesce fires; true marks a
	// promotion whose fire already woke a long-poll to take the due
	// messages (fire), so the job does not wake another.
	pending map[uint64]bool
	running map[uint64]bool // jobs a worker runs now
	jobs    chan uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newDispatcher(e *Engine) *dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{
		e:     e,
		armed: make(map[uint64]int64),
		byID:  make(map[uint64]*topic),

		schedID:   make(map[string]uint64),
		schedName: make(map[uint64]string),
		nextID:    firstTopicID,
		pending:   make(map[uint64]bool),
		running:   make(map[uint64]bool),
		jobs:      make(chan uint64, 1024),
		ctx:       ctx,
		cancel:    cancel,
	}
	d.tm = newWheelTimers(e.clk, e.preciseTimers, d.fire)
	for range workers {
		d.wg.Add(1)
		go d.work()
	}
	return d
}

func (d *dispatcher) stop() {
	d.tm.Stop()
	d.cancel()
	d.wg.Wait()
}

// register gives a topic its wheel entry id.
func (d *dispatcher) register(t *topic) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nextID
	d.nextID++
	d.byID[id] = t
	return id
}

// armSchedule makes sure the schedule's tick handler runs no later than
// due, registering the schedule's wheel entry on first use.
func (d *dispatcher) armSchedule(name string, due int64) {
	d.mu.Lock()
	id, ok := d.schedID[name]
	if !ok {
		id = d.nextID
		d.nextID++
		d.schedID[name] = id
		d.schedName[id] = name
	}
	d.mu.Unlock()
	d.arm(id, due)
}

// forgetIdle unregisters a topic's wheel entry if it is neither armed nor
// queued or running, and reports whether it did. Called under Engine.mu,
// which every lookup takes, so no one can arm the entry afterwards.
func (d *dispatcher) forgetIdle(id uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, queued := d.pending[id]
	if _, armed := d.armed[id]; armed || queued || d.running[id] {
		return false
	}
	delete(d.byID, id)
	return true
}

// forgetSchedule drops a deleted schedule's entry. A timer still armed
// for it fires into nothing.
func (d *dispatcher) forgetSchedule(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := d.schedID[name]; ok {
		delete(d.schedID, name)
		delete(d.schedName, id)
		delete(d.armed, id)
	}
}

// armPromote makes sure the topic's promotion runs no later than due, an
// instant of the store's clock (a record's DueAt).
func (d *dispatcher) armPromote(t *topic, due int64) { d.arm(t.wheel, d.e.local(due)) }

// armPromoteIn makes sure the topic's promotion runs within ms milliseconds.
func (d *dispatcher) armPromoteIn(t *topic, ms int64) { d.arm(t.wheel, d.e.now()+ms) }

// armExpire makes sure the lease-expiry sweep runs no later than a lease
// ending at until, an instant of the store's clock (rounded up to the
// sweep grain).
func (d *dispatcher) armExpire(until int64) { d.armExpireLocal(d.e.local(until)) }

// armExpireIn makes sure the lease-expiry sweep runs within ms milliseconds.
func (d *dispatcher) armExpireIn(ms int64) { d.armExpireLocal(d.e.now() + ms) }

func (d *dispatcher) armExpireLocal(at int64) {
	d.arm(expireID, (at+expireGrain-1)/expireGrain*expireGrain)
}

// arm sets id's timer to due unless it is already armed earlier. The
// timer is set under d.mu, in the order armed changes: two arms racing
// outside it could set the timers in the other order, leaving the timer
// at the later due while armed says the earlier one, which then swallows
// every later arm. (The wheel's fire callback takes d.mu only after
// releasing the runner's locks, so this cannot deadlock.)
func (d *dispatcher) arm(id uint64, due int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.armed[id]
	if ok && cur <= due {
		return
	}
	d.armed[id] = due
	d.tm.Set(id, due)
}

// fire is the wheel's callback; it must not block, so it only queues work.
// A job still waiting in the queue will read the store after this fire, so
// a second one would add nothing; a job already running might not, so
// pending is cleared when a worker starts a job, not when it ends.
//
// On a store.DueLeaser it also hands the release to a waiting long-poll
// here (promote's hand-off, done early): the long-poll's lease starts now
// instead of after a worker picks the job up, so a release never waits
// for a worker that other topics' slow store calls hold. On a
// store.NextDueLeaser, inside the grace, that is all a fire does.
//
// Every fire wakes, even one coalesced into a queued job: the long-poll a
// fire woke may lease, report the next due time and re-arm the entry
// before a worker has taken the job (workers busy with other topics), and
// the next fire then has a message of its own to hand over.
func (d *dispatcher) fire(id uint64) {
	d.mu.Lock()
	delete(d.armed, id)
	t := d.byID[id]
	d.mu.Unlock()
	woke := t != nil && d.e.due != nil && t.wakeOne()
	if woke && d.e.dueNext != nil && t.busySkips.Load() < maxBusySkips {
		// What promote would do first on a store.NextDueLeaser: leave the
		// release to the woken long-poll, whose lease re-arms the entry.
		// Then there is no job at all, and no worker to wake per release.
		if _, left := d.e.leaveToLease(t); left {
			return
		}
	}
	d.mu.Lock()
	wokeBefore, queued := d.pending[id]
	d.pending[id] = woke || wokeBefore
	d.mu.Unlock()
	if !queued {
		d.enqueue(id)
	}
}

func (d *dispatcher) enqueue(id uint64) {
	select {
	case d.jobs <- id:
	default:
		// The queue is full (thousands of topics due at once): run it from
		// a fresh goroutine owned by the pool's WaitGroup rather than block
		// the wheel.
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			select {
			case d.jobs <- id:
			case <-d.ctx.Done():
			}
		}()
	}
}

func (d *dispatcher) work() {
	defer d.wg.Done()
	for {
		select {
		case <-d.ctx.Done():
			return
		case id := <-d.jobs:
			d.mu.Lock()
			woke := d.pending[id]
			delete(d.pending, id)
			d.running[id] = true
			d.mu.Unlock()
			d.run(id, woke)
			d.mu.Lock()
			delete(d.running, id)
			d.mu.Unlock()
		}
	}
}

// run runs a fired entry's job; woke: its fire woke a long-poll (fire).
func (d *dispatcher) run(id uint64, woke bool) {
	if id == expireID {
		trace.WithRegion(d.ctx, "delayq.expire", func() { d.e.expireLeases(d.ctx) })
		return
	}
	d.mu.Lock()
	t := d.byID[id]
	name, isSched := d.schedName[id]
	d.mu.Unlock()
	switch {
	case t != nil:
		// Regions name the engine's steps in an execution trace (delayq
		// bench --trace, /debug/pprof/trace); free when not tracing.
		trace.WithRegion(d.ctx, "delayq.promote", func() { d.e.promote(d.ctx, t, true, woke) })
	case isSched:
		d.e.fireSchedule(d.ctx, name)
	}
}
