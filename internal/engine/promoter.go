package engine

import (
	"cmp"
	"context"
	"errors"

	"github.com/delayq/delayq/internal/store"
)

// promote moves a topic's due messages to ready, wakes its long-polls and
// re-arms its wheel entry at the next due time. Each store call is atomic;
// a burst larger than promoteBatch takes several calls, each one waking
// consumers as soon as its messages are ready.
func (e *Engine) promote(ctx context.Context, t *topic) {
	for {
		now := e.now()
		sent := e.clk.Now()
		res, err := e.st.MessagePromote(ctx, &store.MessagePromoteParams{Topic: t.name, Now: now, Max: promoteBatch})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				e.events.storeError("promote")
				e.log.Error("promote due messages", "topic", t.name, "err", err)
				e.dispatcher.armPromoteIn(t, retryAfterErr)
			}
			return
		}
		e.skew.sample(res.Now, sent, e.clk.Now())
		if res.Promoted > 0 {
			t.notifyN(res.Promoted)
		}
		if res.NextDue == 0 {
			return
		}
		// Sleep by the store's judgement of time when it has its own
		// clock (Redis TIME): arming at NextDue by our clock would spin
		// or fire late when the two disagree.
		storeNow := cmp.Or(res.Now, now)
		if res.NextDue > storeNow || res.Promoted < promoteBatch {
			e.dispatcher.armPromoteIn(t, max(res.NextDue-storeNow, 1))
			return
		}
	}
}
