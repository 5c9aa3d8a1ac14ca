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
// call, not RunDue's), it wakes that long-poll first (or the timer's fire
// already did: woke), whose lease takes the due messages straight from
// scheduled in one transaction, and promotes only the messages due for
// longer than leaseGrace: a promotion of the newly due ones would lock
// them first and make the waiter wait for its commit, the second
// transaction the hand-off saves.
//
// On a store.NextDueLeaser the store call waits too: the woken long-poll's
// lease reports when to fire next (armReported), and a grace promotion runs
// only once a grace has passed since the first wake-up left to a lease,
// for what the woken long-polls did not take (leaveToLease). There the
// release is left to a lease even when no long-poll waits (the topic's
// consumers are busy with earlier messages): the next lease takes what
// came due straight from scheduled, as a woken one would, so a promotion
// (a store write whose messages that lease then rewrites) is only for
// what stays unleased for a grace.
func (e *Engine) promote(ctx context.Context, t *topic, handOff, woke bool) {
	var grace, graceBy int64
	if handOff && e.due != nil && (woke || t.wakeOne() || e.dueNext != nil && !t.throttled()) && t.busySkips.Load() < maxBusySkips {
		grace = leaseGrace
		if e.dueNext != nil {
			var left bool
			if graceBy, left = e.leaveToLease(t); left {
				return
			}
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
		// Sleep by the store's judgement of time when it has its own
		// clock (Redis TIME): arming at NextDue by our clock would spin
		// or fire late when the two disagree.
		storeNow := cmp.Or(res.Now, now)
		if grace > 0 && e.dueNext != nil {
			// Also when nothing is left: a passed deadline kept would make
			// the next message's fire ask the store at once instead of
			// leaving it to a lease.
			var by int64 // the held message's grace, or none
			if res.HeldDue != 0 {
				by = e.now() + max(res.HeldDue+grace-storeNow, 1)
			}
			t.resetGrace(graceBy, by)
		}
		if res.NextDue == 0 && res.HeldDue == 0 {
			return
		}
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

// leaveToLease decides, for a timer that just woke a long-poll, whether
// to leave the release to that long-poll's lease (true): it takes what
// came due and reports when to fire next. The first wake-up left so sets
// the topic's grace deadline a grace away; once it has passed, the timer
// asks the store again (false, with the deadline it saw), so that what a
// woken long-poll did not lease (cancelled, paused, left at Max) is
// promoted a grace or so after it came due, as before, while a topic
// releasing one message a millisecond makes about one grace promotion
// per grace instead of one per message.
func (e *Engine) leaveToLease(t *topic) (graceBy int64, left bool) {
	now := e.now()
	for {
		g := t.graceBy.Load()
		if g != 0 && now >= g {
			return g, false
		}
		if g == 0 {
			g = now + leaseGrace
			if !t.graceBy.CompareAndSwap(0, g) {
				continue
			}
		}
		e.dispatcher.armPromoteIn(t, max(g-now, 1))
		return g, true
	}
}

// resetGrace replaces the grace deadline a grace promotion was asked at
// (seen) by the next one it found (by: the grace of a due message it
// left to the leases; 0: none). A deadline set meanwhile by leaveToLease
// or armReported is kept when earlier: a lease may be relying on it.
func (t *topic) resetGrace(seen, by int64) {
	for {
		cur := t.graceBy.Load()
		want := by
		if cur != seen && cur != 0 && (by == 0 || cur < by) {
			want = cur
		}
		if t.graceBy.CompareAndSwap(cur, want) {
			return
		}
	}
}

// armReported arms t's timer at the next due time a store.NextDueLeaser's
// lease reported (now: the engine's now the lease was asked with). A due
// message the lease left (NextDue <= its now) fires the timer at once,
// which wakes another long-poll or promotes it, and sets the grace
// deadline if there is none, so that it is promoted within a grace if no
// lease takes it.
func (e *Engine) armReported(t *topic, res *store.LeaseDueResult, now int64) {
	if res.NextDue == 0 {
		return
	}
	storeNow := cmp.Or(res.Now, now)
	e.dispatcher.armPromoteIn(t, max(res.NextDue-storeNow, 1))
	if res.NextDue <= storeNow {
		t.graceBy.CompareAndSwap(0, e.now()+leaseGrace)
	}
}

// leave is topic.leave for a long-poll of the engine. A timer's wake-up
// that reached no lease (the one it woke answered without it, and no
// other long-poll waits) may have been left the release of a due message
// (leaveToLease) whose report will not come: the timer asks the store at
// once instead of after the grace.
func (e *Engine) leave(t *topic, w *waiter) {
	if t.leave(w) && e.dueNext != nil {
		t.graceBy.Store(1) // passed: the next fire asks the store
		e.dispatcher.armPromoteIn(t, 1)
	}
}
