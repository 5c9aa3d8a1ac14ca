package engine

import (
	"context"
	"fmt"

	"github.com/delayq/delayq/internal/domain"
)

// RunDue does at once, on the calling goroutine, what the engine's timers
// would do for the clock's current reading: it fires the recurring
// schedules whose tick has come, expires the leases that ended, promotes
// every topic's due messages (waking their long-polls) and purges the
// acked ids whose dedup window is over. When it returns, every message due
// by the clock reading it started with is ready (or, if its lease ended,
// redelivered or dead).
//
// It is for a simulated clock (delayqtest): the timers sleep on the real
// clock and would notice the simulated clock's jump only at their next
// wake-up, up to maxSleep later. The timers keep running; work they do at
// the same time is safe, as with several engines on one store (each store
// call is atomic and the timers are re-armed at the earliest time asked).
func (e *Engine) RunDue(ctx context.Context) error {
	if e.isClosing() {
		return domain.ErrUnavailable
	}
	scheds, err := e.st.ScheduleList(ctx)
	if err != nil {
		return fmt.Errorf("engine: list schedules: %w", err)
	}
	for _, s := range scheds {
		e.fireSchedule(ctx, s.Name) // sends nothing if no tick is due
	}
	// Before promotion: an expired lease may make its message due now.
	e.expireLeases(ctx)
	recs, err := e.st.TopicList(ctx)
	if err != nil {
		return fmt.Errorf("engine: list topics: %w", err)
	}
	now := e.now()
	for _, r := range recs {
		if r.NextDue != 0 && e.local(r.NextDue) <= now {
			e.promote(ctx, e.topic(r.Name), false, false)
		}
	}
	e.purgeDedup(ctx) // the janitor's ticker runs on the real clock
	return nil
}
