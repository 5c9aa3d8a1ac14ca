package engine

import (
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
		res, err := e.st.MessagePromote(ctx, &store.MessagePromoteParams{Topic: t.name, Now: now, Max: promoteBatch})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				e.obs.StoreError("promote")
				e.log.Error("promote due messages", "topic", t.name, "err", err)
				e.sched.armPromote(t, now+retryAfterErr)
			}
			return
		}
		if res.Promoted > 0 {
			t.notify()
		}
		if res.NextDue == 0 {
			return
		}
		if res.NextDue > now || res.Promoted < promoteBatch {
			e.sched.armPromote(t, res.NextDue)
			return
		}
	}
}
