package engine

import (
	"context"
	"runtime/trace"
	"sync"
)

// timers is what the scheduler needs from the timing wheel's runner: one
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

// scheduler arms wheel entries and runs the due work (promotion, lease
// expiry, recurring schedules' ticks) on a small pool of workers, so a slow store call never delays the
// wheel's other timers. It owns its goroutines.
type scheduler struct {
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
	pending   map[uint64]bool // jobs queued, to coalesce fires
	running   map[uint64]bool // jobs a worker runs now
	jobs      chan uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newScheduler(e *Engine) *scheduler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &scheduler{
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
	s.tm = newWheelTimers(e.clk, s.fire)
	for range workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

func (s *scheduler) stop() {
	s.tm.Stop()
	s.cancel()
	s.wg.Wait()
}

// register gives a topic its wheel entry id.
func (s *scheduler) register(t *topic) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID++
	s.byID[id] = t
	return id
}

// armSchedule makes sure the schedule's tick handler runs no later than
// due, registering the schedule's wheel entry on first use.
func (s *scheduler) armSchedule(name string, due int64) {
	s.mu.Lock()
	id, ok := s.schedID[name]
	if !ok {
		id = s.nextID
		s.nextID++
		s.schedID[name] = id
		s.schedName[id] = name
	}
	s.mu.Unlock()
	s.arm(id, due)
}

// forgetIdle unregisters a topic's wheel entry if it is neither armed nor
// queued or running, and reports whether it did. Called under Engine.mu,
// which every lookup takes, so no one can arm the entry afterwards.
func (s *scheduler) forgetIdle(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, armed := s.armed[id]; armed || s.pending[id] || s.running[id] {
		return false
	}
	delete(s.byID, id)
	return true
}

// forgetSchedule drops a deleted schedule's entry. A timer still armed
// for it fires into nothing.
func (s *scheduler) forgetSchedule(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.schedID[name]; ok {
		delete(s.schedID, name)
		delete(s.schedName, id)
		delete(s.armed, id)
	}
}

// armPromote makes sure the topic's promotion runs no later than due, an
// instant of the store's clock (a record's DueAt).
func (s *scheduler) armPromote(t *topic, due int64) { s.arm(t.wheel, s.e.local(due)) }

// armPromoteIn makes sure the topic's promotion runs within d ms.
func (s *scheduler) armPromoteIn(t *topic, d int64) { s.arm(t.wheel, s.e.now()+d) }

// armExpire makes sure the lease-expiry sweep runs no later than a lease
// ending at until, an instant of the store's clock (rounded up to the
// sweep grain).
func (s *scheduler) armExpire(until int64) { s.armExpireLocal(s.e.local(until)) }

// armExpireIn makes sure the lease-expiry sweep runs within d ms.
func (s *scheduler) armExpireIn(d int64) { s.armExpireLocal(s.e.now() + d) }

func (s *scheduler) armExpireLocal(at int64) {
	s.arm(expireID, (at+expireGrain-1)/expireGrain*expireGrain)
}

// arm sets id's timer to due unless it is already armed earlier. The
// timer is set under s.mu, in the order armed changes: two arms racing
// outside it could set the timers in the other order, leaving the timer
// at the later due while armed says the earlier one, which then swallows
// every later arm. (The wheel's fire callback takes s.mu only after
// releasing the runner's locks, so this cannot deadlock.)
func (s *scheduler) arm(id uint64, due int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.armed[id]
	if ok && cur <= due {
		return
	}
	s.armed[id] = due
	s.tm.Set(id, due)
}

// fire is the wheel's callback; it must not block, so it only queues work.
// A job still waiting in the queue will read the store after this fire, so
// a second one would add nothing; a job already running might not, so
// pending is cleared when a worker starts a job, not when it ends.
func (s *scheduler) fire(id uint64) {
	s.mu.Lock()
	delete(s.armed, id)
	if s.pending[id] {
		s.mu.Unlock()
		return
	}
	s.pending[id] = true
	s.mu.Unlock()
	s.enqueue(id)
}

func (s *scheduler) enqueue(id uint64) {
	select {
	case s.jobs <- id:
	default:
		// The queue is full (thousands of topics due at once): run it from
		// a fresh goroutine owned by the pool's WaitGroup rather than block
		// the wheel.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			select {
			case s.jobs <- id:
			case <-s.ctx.Done():
			}
		}()
	}
}

func (s *scheduler) work() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case id := <-s.jobs:
			s.mu.Lock()
			delete(s.pending, id)
			s.running[id] = true
			s.mu.Unlock()
			s.run(id)
			s.mu.Lock()
			delete(s.running, id)
			s.mu.Unlock()
		}
	}
}

func (s *scheduler) run(id uint64) {
	if id == expireID {
		trace.WithRegion(s.ctx, "delayq.expire", func() { s.e.expireLeases(s.ctx) })
		return
	}
	s.mu.Lock()
	t := s.byID[id]
	name, isSched := s.schedName[id]
	s.mu.Unlock()
	switch {
	case t != nil:
		// Regions name the engine's steps in an execution trace (delayq
		// bench --trace, /debug/pprof/trace); free when not tracing.
		trace.WithRegion(s.ctx, "delayq.promote", func() { s.e.promote(s.ctx, t) })
	case isSched:
		s.e.fireSchedule(s.ctx, name)
	}
}
