package engine

import (
	"context"
	"errors"

	"github.com/delayq/delayq/internal/store"
)

// expireLeases redelivers messages whose lease ran out (a failure each, so
// a message that keeps killing its consumer ends in dead letters), then
// re-arms the sweep at the earliest remaining lease expiry.
func (e *Engine) expireLeases(ctx context.Context) {
	expired := 0
	for {
		recs, err := e.st.LeaseExpire(ctx, &store.LeaseExpireParams{Now: e.now(), Max: expireBatch})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				e.events.storeError("expire")
				e.log.Error("expire leases", "err", err)
				e.dispatcher.armExpireIn(retryAfterErr)
			}
			return
		}
		expired += len(recs)
		e.afterExpire(recs)
		if len(recs) < expireBatch {
			break
		}
	}
	e.rearmExpire(ctx, expired == 0)
}

func (e *Engine) afterExpire(recs []*store.Record) {
	woken := map[string]bool{}
	for _, r := range recs {
		e.events.count(EventExpired, r.Topic, 1)
		if r.State == store.StateDead {
			e.events.count(EventDied, r.Topic, 1)
			continue
		}
		if !woken[r.Topic] {
			woken[r.Topic] = true
			e.topic(r.Topic).notify()
		}
	}
}

// rearmExpire finds the earliest lease expiry across topics. It runs at
// most once per sweep, and sweeps are coalesced to expireGrain. After a
// sweep that expired nothing, the next one waits at least expireGrain: the
// store judges expiry by its own clock, and if that clock is behind our
// estimate of it, a lease that looks expired here is not expired there —
// re-sweeping at once would spin until the store's clock catches up.
func (e *Engine) rearmExpire(ctx context.Context, idle bool) {
	recs, err := e.st.TopicList(ctx)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
			e.log.Error("find next lease expiry", "err", err)
			e.dispatcher.armExpireIn(retryAfterErr)
		}
		return
	}
	var next int64
	for _, r := range recs {
		if r.NextLeaseExpiry != 0 && (next == 0 || r.NextLeaseExpiry < next) {
			next = r.NextLeaseExpiry
		}
	}
	switch {
	case next == 0:
	case idle && e.local(next) < e.now()+expireGrain:
		e.dispatcher.armExpireIn(expireGrain)
	default:
		e.dispatcher.armExpire(next)
	}
}
