package httpapi

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// byteBudget bounds the bytes of request bodies held at once across all
// requests. Each body is charged for its buffer as the buffer grows and
// credited when its handler returns. Without it, 60 concurrent 15 MB
// batch bodies held ~1 GB of buffers (plus the garbage of growing them),
// and the heap stayed at that size afterwards.
//
// A body waits for room holding what it already read, so bodies growing
// at once can fill the budget with halves: each waits for bytes only
// another's end would free, and none ends. They used to wait out their
// second together and all get 503 (32 bodies of 3.75 MiB on an 8 MiB
// budget: 0 or 1 read through). Now the waiters queue, the one holding
// most first, and when every byte charged is held by a waiter the one
// holding least is refused at once, so the bytes flow to the body
// nearest its end.
type byteBudget struct {
	max int64

	mu       sync.Mutex
	used     int64
	peak     int64           // highest use since memory was last returned
	waiting  []*budgetWaiter // in grant order: most held first, then arrival
	waitHeld int64           // bytes held by the requests in waiting
	// returning is set while a give-back to the OS is scheduled or running.
	returning bool
	lastFree  time.Time
}

// budgetWaiter is a request waiting in acquire. decided is closed once
// its bytes were charged (err nil) or it was refused (err set).
type budgetWaiter struct {
	held, need int64
	decided    chan struct{}
	err        error
}

// Budget tuning. A request over the budget waits bodyBudgetWait at most
// (bodies being read finish in about that time on a sane link), then gets
// 503 with Retry-After. Once the bodies held drop to zero after holding
// at least a quarter of the budget, the heap is returned to the OS (at
// most every returnEvery): Go would otherwise keep it until its next GC
// cycles, which an idle server does not run.
const (
	bodyBudgetWait = time.Second
	returnEvery    = 10 * time.Second
)

func newByteBudget(max int64) *byteBudget {
	return &byteBudget{max: max}
}

// errBodyBudget is a body refused because others fill the budget (503).
var errBodyBudget = fmt.Errorf("%w: the server is reading too many request bodies at once (Config.MaxBodyMemory); retry shortly", domain.ErrUnavailable)

// acquire charges n more bytes to a request that holds held already,
// waiting up to bodyBudgetWait (measured from *deadline, set on the
// request's first wait) for its turn. A body's first buffer (held 0,
// at most firstBodyBuf) is charged at once if it fits, so a single send
// does not queue behind batch bodies growing; a growing body queues
// behind the waiters holding more, so growing ones cannot take the room
// the head of the queue waits for.
func (b *byteBudget) acquire(ctx context.Context, n, held int64, deadline *time.Time) error {
	if b == nil || n <= 0 {
		return nil
	}
	b.mu.Lock()
	if (held == 0 || len(b.waiting) == 0) && b.used+n <= b.max {
		b.charge(n)
		b.mu.Unlock()
		return nil
	}
	if deadline.IsZero() {
		*deadline = time.Now().Add(bodyBudgetWait)
	}
	left := time.Until(*deadline)
	if left <= 0 {
		b.mu.Unlock()
		return errBodyBudget
	}
	w := &budgetWaiter{held: held, need: n, decided: make(chan struct{})}
	b.enqueue(w)
	b.settle()
	b.mu.Unlock()

	t := time.NewTimer(left)
	defer t.Stop()
	var err error
	select {
	case <-w.decided:
		return w.err
	case <-t.C:
		err = errBodyBudget
	case <-ctx.Done():
		err = ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.decided: // decided while the timer fired: keep the decision
		return w.err
	default:
	}
	b.dequeue(w)
	b.settle() // the head may have changed
	return err
}

// charge adds n to the bytes in use. b.mu is held.
func (b *byteBudget) charge(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

// enqueue puts w in grant order, after the waiters holding as much or
// more. b.mu is held.
func (b *byteBudget) enqueue(w *budgetWaiter) {
	i := len(b.waiting)
	for i > 0 && b.waiting[i-1].held < w.held {
		i--
	}
	b.waiting = slices.Insert(b.waiting, i, w)
	b.waitHeld += w.held
}

// dequeue takes w out of the queue. b.mu is held.
func (b *byteBudget) dequeue(w *budgetWaiter) {
	if i := slices.Index(b.waiting, w); i >= 0 {
		b.waiting = slices.Delete(b.waiting, i, i+1)
		b.waitHeld -= w.held
	}
}

// settle charges the waiters whose turn it is while they fit, and breaks
// a standstill: when the head does not fit and every byte in use is held
// by a waiter, no release will come but from a refusal, so the waiter
// holding least (the least read in vain) is refused. Its bytes come back
// with its release, which settles again. b.mu is held.
func (b *byteBudget) settle() {
	for len(b.waiting) > 0 {
		head := b.waiting[0]
		if b.used+head.need <= b.max {
			b.dequeue(head)
			b.charge(head.need)
			close(head.decided)
			continue
		}
		if b.used > b.waitHeld {
			return // a request reading or being handled will release
		}
		victim := head // nothing held at all: the head needs more than the budget
		for _, w := range b.waiting {
			if w.held > 0 && (victim.held == 0 || w.held <= victim.held) {
				victim = w
			}
		}
		b.dequeue(victim)
		victim.err = errBodyBudget
		close(victim.decided)
		if victim.held > 0 {
			return
		}
	}
}

// release credits n bytes, and returns memory to the OS after a burst.
func (b *byteBudget) release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.settle()
	if b.used == 0 && b.peak >= b.max/4 && !b.returning {
		b.returning, b.peak = true, 0
		time.AfterFunc(max(returnEvery-time.Since(b.lastFree), 0), b.giveBack)
	}
}

// giveBack returns the freed heap to the OS: a GC and a scavenge. The
// bodies are garbage by now, but without allocation no GC would run to
// notice, and the process would keep its peak size. The collection
// before it moves the pooled body buffers (bodyPools) to sync.Pool's
// victim cache, from which FreeOSMemory's drops them: a burst of large
// bodies would otherwise leave its buffers pooled on an idle server.
func (b *byteBudget) giveBack() {
	runtime.GC()
	debug.FreeOSMemory()
	b.mu.Lock()
	b.returning, b.lastFree = false, time.Now()
	b.mu.Unlock()
}

// inUse is the bytes charged now (tests).
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
