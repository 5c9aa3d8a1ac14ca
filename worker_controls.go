package delayq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrSkipRetry marks a handler's error as permanent: the Worker moves the
// message to dead letters at once instead of retrying it (asynq's
// SkipRetry, BullMQ's UnrecoverableError). Wrap it with SkipRetry, or
// return an error that matches it with errors.Is.
var ErrSkipRetry = errors.New("delayq: skip retry")

// ErrHandlerTimeout is the cause of a handler's context cancellation when
// the handler ran past its timeout (HandlerTimeout, WorkerConfig.HandlerTimeout).
var ErrHandlerTimeout = errors.New("delayq: handler timeout")

// SkipRetry returns err marked as permanent: returned by a handler, the
// message goes to dead letters now, with err as its last error, whatever
// attempts it has left. A nil err gives a plain ErrSkipRetry.
func SkipRetry(err error) error {
	if err == nil {
		return ErrSkipRetry
	}
	return &skipRetryError{err}
}

type skipRetryError struct{ err error }

func (e *skipRetryError) Error() string { return e.err.Error() }
func (e *skipRetryError) Unwrap() []error {
	return []error{e.err, ErrSkipRetry}
}

// RetryAfter returns err with a retry delay: returned by a handler, the
// message is due again after d instead of after the topic's backoff (a
// rate-limited API's Retry-After, a resource known to be back at a given
// time). The attempt still counts: at max_attempts the message goes dead
// as usual. A nil err reads "retry after <d>".
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = fmt.Errorf("retry after %s", d)
	}
	return &retryAfterError{d: max(d, 0), err: err}
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// nackFor turns a handler's error into the nack the Worker sends.
func nackFor(err error) NackRequest {
	req := NackRequest{Reason: truncateUTF8(err.Error(), 1000)}
	var ra *retryAfterError
	switch {
	case errors.Is(err, ErrSkipRetry):
		req.Dead = true
	case errors.As(err, &ra):
		req.Delay, req.HasDelay = ra.d, true
	}
	return req
}

// A HandlerOption tunes one topic's handling: see Worker.Handle.
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	timeout time.Duration
	weight  int
}

// HandlerTimeout bounds each call of the topic's handler. At the deadline the
// handler's context is cancelled (cause ErrHandlerTimeout) and the lease
// is no longer extended; the message is nacked when the handler returns,
// or, for a handler that ignores its context, handed out again when its
// lease runs out. Overrides WorkerConfig.HandlerTimeout; 0 keeps it.
func HandlerTimeout(d time.Duration) HandlerOption {
	return func(o *handlerOptions) { o.timeout = d }
}

// HandlerWeight sets the topic's share of WorkerConfig.SharedConcurrency:
// when the worker's topics compete for handler slots, each gets slots in
// proportion to its weight (default 1), or, with StrictPriority, the
// heaviest waiting topic goes first. Without SharedConcurrency it has no
// effect (each topic has Concurrency slots of its own).
func HandlerWeight(n int) HandlerOption {
	return func(o *handlerOptions) { o.weight = n }
}

// slots hands out a topic's handler slots: one per running handler, taken
// before leasing (so a worker never leases more than it can run).
type slots interface {
	// acquire blocks for one slot, then takes up to max-1 more that are
	// free now. It returns how many it took (0 when ctx ended).
	acquire(ctx context.Context, max int) int
	release(n int)
}

// ownSlots are a topic's own Concurrency slots.
type ownSlots chan struct{}

func (s ownSlots) acquire(ctx context.Context, max int) int {
	select {
	case s <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < max {
		select {
		case s <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (s ownSlots) release(n int) {
	for range n {
		<-s
	}
}

// slotPool is WorkerConfig.SharedConcurrency: slots shared by every topic.
// Each topic competing for slots (holding some, waiting, or with a
// backlog) has a share in proportion to its weight. A topic under its
// share takes free slots up to it; one at or over its share takes free
// slots only while no topic with a backlog is under its own — so a free
// slot waits the moment it takes a busy topic's fetch loop to come back
// for it, instead of going to whoever asks first. Idle topics' shares go
// to the busy ones.
type slotPool struct {
	mu      sync.Mutex
	free    int
	total   int
	strict  bool
	waiting []*slotWait // topics blocked in acquire, in arrival order
	topics  []*poolSlots
}

type slotWait struct {
	s     *poolSlots
	max   int
	grant chan int // buffered 1
}

func newSlotPool(total int, strict bool) *slotPool {
	return &slotPool{free: total, total: total, strict: strict}
}

// poolSlots is one topic's view of a slotPool.
type poolSlots struct {
	p       *slotPool
	weight  int
	users   int  // slots held
	waiting bool // blocked in acquire
	backlog bool // its last lease filled every slot it asked with
}

func (p *slotPool) join(weight int) *poolSlots {
	s := &poolSlots{p: p, weight: weight}
	p.mu.Lock()
	p.topics = append(p.topics, s)
	p.mu.Unlock()
	return s
}

// leased records how a lease went: a full answer means a backlog.
func (s *poolSlots) leased(asked, got int) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.backlog = got >= asked
	s.p.dispatchLocked()
}

func (s *poolSlots) acquire(ctx context.Context, max int) int {
	p := s.p
	p.mu.Lock()
	if len(p.waiting) == 0 {
		if n := p.grantLocked(s, max); n > 0 {
			p.mu.Unlock()
			return n
		}
	}
	w := &slotWait{s: s, max: max, grant: make(chan int, 1)}
	p.waiting = append(p.waiting, w)
	s.waiting = true
	p.mu.Unlock()
	select {
	case n := <-w.grant:
		return n
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, x := range p.waiting {
			if x == w {
				p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
				s.waiting = false
				return 0
			}
		}
		// Granted while giving up: hand the slots back.
		n := <-w.grant
		s.users -= n
		p.free += n
		p.dispatchLocked()
		return 0
	}
}

func (s *poolSlots) release(n int) {
	if n == 0 {
		return
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	s.users -= n
	p.free += n
	p.dispatchLocked()
}

func (s *poolSlots) competing() bool { return s.users > 0 || s.waiting || s.backlog }

// shareLocked is s's weighted share of the pool among the competing
// topics (s included), at least one slot.
func (p *slotPool) shareLocked(s *poolSlots) int {
	sum := s.weight
	for _, o := range p.topics {
		if o != s && o.competing() {
			if p.strict && o.weight > s.weight && o.backlog {
				return 1 // a heavier busy topic takes all it can use
			}
			sum += o.weight
		}
	}
	return max(1, p.total*s.weight/sum)
}

// grantLocked takes up to max free slots for s, by the rules above, and
// reports how many.
func (p *slotPool) grantLocked(s *poolSlots, max int) int {
	if p.free == 0 {
		return 0
	}
	n := min(max, p.free)
	if share := p.shareLocked(s); s.users < share {
		n = min(n, share-s.users)
	} else {
		for _, o := range p.topics {
			if o != s && o.backlog && o.users < p.shareLocked(o) {
				return 0 // keep the slot for the busy topic under its share
			}
		}
	}
	p.free -= n
	s.users += n
	return n
}

// dispatchLocked grants free slots to waiting topics, the one furthest
// below its share first (the heaviest first when strict).
func (p *slotPool) dispatchLocked() {
	for p.free > 0 && len(p.waiting) > 0 {
		best := 0
		for i, w := range p.waiting[1:] {
			if p.before(w.s, p.waiting[best].s) {
				best = i + 1
			}
		}
		w := p.waiting[best]
		n := p.grantLocked(w.s, w.max)
		if n == 0 {
			return // the best waiter may not have them: no one else may either
		}
		p.waiting = append(p.waiting[:best], p.waiting[best+1:]...)
		w.s.waiting = false
		w.grant <- n
	}
}

// before reports whether a should be served before b.
func (p *slotPool) before(a, b *poolSlots) bool {
	if p.strict && a.weight != b.weight {
		return a.weight > b.weight
	}
	// Compare users/weight without division.
	return a.users*b.weight < b.users*a.weight
}
