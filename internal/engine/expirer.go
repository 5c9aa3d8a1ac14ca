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
	for {
		now := e.now()
		recs, err := e.st.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: expireBatch})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				e.obs.StoreError("expire")
				e.log.Error("expire leases", "err", err)
				e.sched.armExpire(now + retryAfterErr)
			}
			return
		}
		e.afterExpire(recs)
		if len(recs) < expireBatch {
			break
		}
	}
	e.rearmExpire(ctx)
}

func (e *Engine) afterExpire(recs []*store.Record) {
	woken := map[string]bool{}
	for _, r := range recs {
		e.obs.Expired(r.Topic, 1)
		if r.State == store.StateDead {
			e.obs.Died(r.Topic, 1)
			continue
		}
		if !woken[r.Topic] {
			woken[r.Topic] = true
			e.topic(r.Topic).notify()
		}
	}
}

// rearmExpire finds the earliest lease expiry across topics. It runs at
// most once per sweep, and sweeps are coalesced to expireGrain.
func (e *Engine) rearmExpire(ctx context.Context) {
	recs, err := e.st.TopicList(ctx)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
			e.log.Error("find next lease expiry", "err", err)
			e.sched.armExpire(e.now() + retryAfterErr)
		}
		return
	}
	var next int64
	for _, r := range recs {
		if r.NextLeaseExpiry != 0 && (next == 0 || r.NextLeaseExpiry < next) {
			next = r.NextLeaseExpiry
		}
	}
	if next != 0 {
		e.sched.armExpire(next)
	}
}
