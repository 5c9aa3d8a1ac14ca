package engine

import (
	"cmp"
	"context"
	"errors"

	"github.com/delayq/delayq/internal/store"
)

// leaseGrace (ms) is how long a due message is left to the long-polls a
// timer woke, on a store.DueLeaser, before a promotion makes it ready.
// It only matters when they do not lease it: paused, cancelled, or busy.
const leaseGrace = 50

// busyRetry (ms) is when a grace promotion that found its topic busy
// (store.PromoteResult.Busy) is tried again.
const busyRetry = 1

// maxBusySkips bounds the busy answers in a row before a promotion waits.
const maxBusySkips = 20

// promote moves a topic's due messages to ready, wakes its long-polls and
// re-arms its wheel entry at the next due time. Each store call is atomic;
// a burst larger than promoteBatch takes several calls, each one waking
// consumers as soon as its messages are ready.
//
// On a store.DueLeaser with a long-poll waiting (and handOff: a timer's
// call, not RunDue's), it wakes that long-poll first, whose lease takes
// the due messages straight from scheduled in one transaction, and
// promotes only the messages due for longer than leaseGrace: a promotion
// of the newly due ones would lock them first and make the waiter wait
// for its commit, the second transaction the hand-off saves.
func (e *Engine) promote(ctx context.Context, t *topic, handOff bool) {
	var grace int64
	if handOff && e.due != nil && t.wakeOne() && t.busySkips.Load() < maxBusySkips {
		grace = leaseGrace
	}
	for {
		now := e.now()
		sent := e.clk.Now()
		p := &store.MessagePromoteParams{Topic: t.name, Now: now, Max: promoteBatch}
		var res *store.PromoteResult
		var err error
		if grace > 0 {
			res, err = e.due.MessagePromoteGrace(ctx, p, grace)
		} else {
			res, err = e.st.MessagePromote(ctx, p)
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				e.events.storeError("promote")
				e.log.Error("promote due messages", "topic", t.name, "err", err)
				e.dispatcher.armPromoteIn(t, retryAfterErr)
			}
			return
		}
		if res.Busy {
			// A lease holds the topic (most likely the one just woken,
			// taking what came due): look again shortly rather than queue
			// behind it. After maxBusySkips in a row, a plain promotion
			// waits for the lock, so a topic always busy still promotes.
			t.busySkips.Add(1)
			e.dispatcher.armPromoteIn(t, busyRetry)
			return
		}
		t.busySkips.Store(0)
		e.skew.sample(res.Now, sent, e.clk.Now())
		if res.Promoted > 0 {
			t.notifyN(res.Promoted)
		}
		if res.NextDue == 0 && res.HeldDue == 0 {
			return
		}
		// Sleep by the store's judgement of time when it has its own
		// clock (Redis TIME): arming at NextDue by our clock would spin
		// or fire late when the two disagree.
		storeNow := cmp.Or(res.Now, now)
		if grace > 0 && res.Promoted < promoteBatch {
			// Fire again for the next message (waking a waiter), or to
			// promote a due one the long-polls left once its grace is over,
			// whichever comes first (arm keeps the earlier).
			if res.HeldDue != 0 {
				e.dispatcher.armPromoteIn(t, max(res.HeldDue+grace-storeNow, 1))
			}
			if res.NextDue != 0 {
				e.dispatcher.armPromoteIn(t, max(res.NextDue-storeNow, 1))
			}
			return
		}
		if res.Promoted == promoteBatch && res.HeldDue != 0 {
			// Cut short with more still due (a grace promotion's NextDue
			// is then the next message after now, maybe hours away):
			// call again rather than sleep until NextDue.
			continue
		}
		if res.NextDue > storeNow || res.Promoted < promoteBatch {
			e.dispatcher.armPromoteIn(t, max(res.NextDue-storeNow, 1))
			return
		}
	}
}
