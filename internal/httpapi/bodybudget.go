package httpapi

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// byteBudget bounds the bytes of request bodies held at once across all
// requests. Each body is charged for its buffer as the buffer grows and
// credited when its handler returns. Without it, 60 concurrent 15 MB
// batch bodies held ~1 GB of buffers (plus the garbage of growing them),
// and the heap stayed at that size afterwards.
type byteBudget struct {
	max int64

	mu      sync.Mutex
	used    int64
	peak    int64         // highest use since memory was last returned
	waiters int           // requests waiting in acquire
	freed   chan struct{} // closed (and replaced) on a release while some wait
	// returning is set while a give-back to the OS is scheduled or running.
	returning bool
	lastFree  time.Time
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
	return &byteBudget{max: max, freed: make(chan struct{})}
}

// errBodyBudget is a body refused because others fill the budget (503).
var errBodyBudget = fmt.Errorf("%w: the server is reading too many request bodies at once (Config.MaxBodyMemory); retry shortly", domain.ErrUnavailable)

// acquire charges n bytes, waiting up to bodyBudgetWait (measured from
// *deadline, set on the first wait of a request) for others to release.
func (b *byteBudget) acquire(ctx context.Context, n int64, deadline *time.Time) error {
	if b == nil || n <= 0 {
		return nil
	}
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.peak = max(b.peak, b.used)
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
		wait := b.freed
		b.waiters++
		b.mu.Unlock()
		t := time.NewTimer(left)
		var err error
		select {
		case <-wait:
		case <-t.C:
			err = errBodyBudget
		case <-ctx.Done():
			err = ctx.Err()
		}
		t.Stop()
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
		if err != nil {
			return err
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
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
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
