package engine

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// A topic's rate limit is enforced where messages are released: in the
// lease path. Messages over the limit stay ready (never dropped, never
// early); a long-poll waits for tokens within its wait.

// leaseFunc leases up to k ready messages.
type leaseFunc func(k int) ([]*store.Record, error)

// rateGate admits leases under a topic's rate limit.
type rateGate interface {
	// admit calls lease with k in 1..n, the number of messages the limit
	// allows now, and returns its records and k. When no token is
	// available it does not call lease, and returns the wait for one.
	admit(ctx context.Context, t *topic, n int, rl domain.RateLimit, now int64, lease leaseFunc) (recs []*store.Record, granted int, retryAfter time.Duration, err error)
}

// localGate is a token bucket per topic in this process
// (golang.org/x/time/rate on engine time). A topic's admissions are
// serialised (tokens are read, the lease runs, then exactly the messages
// handed out are taken), so tokens are never spent on an empty lease and
// need no refund. Rate-limited topics are slow by definition, so the
// serialisation costs nothing that matters.
type localGate struct{}

// topicLimiter is a topic's local bucket; guarded by its mutex, which is
// held across the lease it admits.
type topicLimiter struct {
	mu  sync.Mutex
	lim *rate.Limiter
}

func (localGate) admit(_ context.Context, t *topic, n int, rl domain.RateLimit, now int64, lease leaseFunc) ([]*store.Record, int, time.Duration, error) {
	tl := &t.limiter
	tl.mu.Lock()
	defer tl.mu.Unlock()
	at := time.UnixMilli(now)
	if tl.lim == nil {
		tl.lim = rate.NewLimiter(rate.Limit(rl.PerSecond), rl.Burst)
	} else if tl.lim.Limit() != rate.Limit(rl.PerSecond) || tl.lim.Burst() != rl.Burst {
		tl.lim.SetLimitAt(at, rate.Limit(rl.PerSecond))
		tl.lim.SetBurstAt(at, rl.Burst)
	}
	tokens := tl.lim.TokensAt(at)
	k := min(n, int(math.Floor(tokens)))
	if k < 1 {
		return nil, 0, untilToken(tokens, rl.PerSecond), nil
	}
	recs, err := lease(k)
	if len(recs) > 0 {
		tl.lim.AllowN(at, len(recs)) // k <= tokens: always true
	}
	return recs, k, 0, err
}

// untilToken is how long a bucket holding tokens (< 1) needs to hold 1.
func untilToken(tokens, perSecond float64) time.Duration {
	s := (1 - tokens) / perSecond
	if !(s < float64(time.Hour/time.Second)) { // also NaN
		return time.Hour // beyond any long-poll's wait
	}
	return max(time.Duration(s*float64(time.Second)), time.Millisecond)
}

// storeGate keeps the buckets in a shared store (Redis), so a topic's
// limit holds across every engine on it. Tokens granted but not used
// (fewer messages were ready) are given back.
type storeGate struct {
	rl     store.RateLimiter
	events *hub
}

func (g storeGate) admit(ctx context.Context, t *topic, n int, rl domain.RateLimit, now int64, lease leaseFunc) ([]*store.Record, int, time.Duration, error) {
	p := &store.RateTakeParams{Topic: t.name, N: n, PerSecond: rl.PerSecond, Burst: rl.Burst, Now: now}
	k, retry, err := g.rl.RateTake(ctx, p)
	if err != nil {
		g.events.storeError("rate")
		return nil, 0, 0, storeErr("rate-limit", "topic "+t.name, err)
	}
	if k < 1 {
		return nil, 0, max(retry, time.Millisecond), nil
	}
	recs, err := lease(k)
	if unused := k - len(recs); unused > 0 {
		p.N = -unused
		// Best effort: a lost refund only makes the limit stricter
		// for a moment.
		if _, _, rerr := g.rl.RateTake(context.WithoutCancel(ctx), p); rerr != nil {
			g.events.storeError("rate")
		}
	}
	return recs, k, 0, err
}

// throttle tracks a topic's throttled period (see EventThrottled):
// it starts when a lease is granted fewer tokens than it asked for and
// uses them all (the limit was binding), and ends with a lease for which
// it was not (all tokens asked for granted, or some left unused). It
// returns the start of the period the released messages were in (0: none).
func (t *topic) throttle(now int64, asked, granted, used int) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	since := t.throttledSince
	if granted < asked && used == granted {
		if since == 0 {
			t.throttledSince = now
			since = now
		}
	} else {
		t.throttledSince = 0
	}
	return since
}
