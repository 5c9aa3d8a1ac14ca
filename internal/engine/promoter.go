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
// for its commit, the second transaction the hand-off saves. The lease
// says what it left (leaseDue), which arms the timer for the next
// message: the promotion is called only once an earlier hand-off is
// leaseGrace old and no lease since has found the due set empty (its
// waiter did not lease: paused, cancelled, busy, or a message held).
func (e *Engine) promote(ctx context.Context, t *topic, handOff bool) {
	var grace int64
	if handOff && e.due != nil {
		now := e.now()
		if woken, oldest := t.handOff(now); woken {
			if oldest == 0 || now-oldest < leaseGrace {
				// Come back when the oldest uncleared hand-off's grace is
				// over, in case no lease clears it by then.
				e.dispatcher.armPromoteIn(t, max(cmp.Or(oldest, now)+leaseGrace-now, 1))
				return
			}
			grace = leaseGrace
		}
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
		e.skew.sample(res.Now, sent, e.clk.Now())
		if e.due != nil {
			// What the hand-offs up to now - grace announced and nobody
			// leased is ready now.
			t.promotedBefore(now - grace)
		}
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
		if res.NextDue > storeNow || res.Promoted < promoteBatch {
			e.dispatcher.armPromoteIn(t, max(res.NextDue-storeNow, 1))
			return
		}
	}
}

// leaseDue runs a DueLeaser's lease and acts on what it left scheduled:
// nothing due left clears the hand-offs before it (the timer need not
// promote after their grace), a message it left due is promoted once its
// grace is over unless a lease takes it first, and the next one due arms
// the timer (whose firing wakes a waiter for it).
func (e *Engine) leaseDue(ctx context.Context, t *topic, p *store.MessageLeaseParams) ([]*store.Record, error) {
	before := t.handOffsSoFar()
	res, err := e.due.MessageLeaseDue(ctx, p)
	if err != nil {
		return nil, err
	}
	if res.LeftDue == 0 {
		t.clearHandOffs(before)
	} else {
		e.dispatcher.armPromote(t, res.LeftDue+leaseGrace)
	}
	if res.NextDue != 0 {
		e.dispatcher.armPromote(t, res.NextDue)
	}
	return res.Records, nil
}
