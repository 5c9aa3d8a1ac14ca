package engine

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"runtime/trace"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// Lease implements domain.Queue. It long-polls: it registers as a waiter
// before each attempt, so a promotion between the attempt and the wait is
// not missed.
func (e *Engine) Lease(ctx context.Context, topicName string, req domain.LeaseRequest) ([]*domain.Message, error) {
	if err := domain.ValidateTopic(topicName); err != nil {
		return nil, err
	}
	max := cmp.Or(req.Max, 1)
	switch {
	case max < 1 || max > domain.MaxBatch:
		return nil, domain.Invalid("max", "must be between 1 and %d", domain.MaxBatch)
	case req.Lease < 0 || req.Lease > MaxLease:
		return nil, domain.Invalid("lease", "must be between 1ms and %s", MaxLease)
	case req.Wait < 0 || req.Wait > domain.MaxWait:
		return nil, domain.Invalid("wait", "must be between 0 and %s", domain.MaxWait)
	}
	t := e.acquire(topicName)
	defer e.release(t)
	lease := req.Lease
	if lease == 0 {
		set, err := e.settings(ctx, t)
		if err != nil {
			return nil, err
		}
		lease = set.Lease
	}
	var timeout <-chan time.Time
	if req.Wait > 0 {
		tm := time.NewTimer(req.Wait)
		defer tm.Stop()
		timeout = tm.C
	}
	last := false
	for {
		if e.isClosing() {
			return nil, domain.ErrUnavailable
		}
		// A caller that has gone (a long-poll whose client hung up, a
		// worker that stopped leasing while a wake-up raced it) must not
		// be handed messages: nobody would handle them, and they would
		// wait out their lease before another consumer could take them.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w := t.waiter()
		r := trace.StartRegion(ctx, "delayq.lease")
		msgs, retry, err := e.leaseOnce(ctx, t, max, lease)
		r.End()
		if err != nil || len(msgs) > 0 || timeout == nil || last {
			e.leave(t, w)
			if len(msgs) > 0 && (len(msgs) == max || t.throttled()) {
				// More may be ready than this answer took (a promotion
				// wakes one waiter per message, and this one may have
				// been woken for several): let one more waiter look.
				t.notifyN(1)
			}
			return msgs, err
		}
		r = trace.StartRegion(ctx, "delayq.lease.wait")
		err = e.waitLease(ctx, w.c, timeout, retry)
		r.End()
		e.leave(t, w)
		switch {
		case errors.Is(err, errWaitOver):
			// One last look before answering "nothing": a wake-up lost
			// anywhere upstream then costs the wait, not an empty answer
			// while messages are ready.
			last = true
		case err != nil:
			return nil, err
		}
	}
}

// errWaitOver ends a long-poll that found nothing.
var errWaitOver = errors.New("long-poll wait is over")

// waitLease waits for a wake-up or the rate limit's next token (retry >
// 0); errWaitOver when the long-poll's wait is over.
func (e *Engine) waitLease(ctx context.Context, wake <-chan struct{}, timeout <-chan time.Time, retry time.Duration) error {
	var tokens <-chan time.Time
	if retry > 0 {
		tm := time.NewTimer(retry)
		defer tm.Stop()
		tokens = tm.C
	}
	select {
	case <-wake:
	case <-tokens:
	case <-timeout:
		return errWaitOver
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closing:
		return domain.ErrUnavailable
	}
	return nil
}

// leaseOnce leases up to max ready messages, within the topic's rate
// limit. When the limit allows none it returns the wait for a token.
func (e *Engine) leaseOnce(ctx context.Context, t *topic, n int, lease time.Duration) ([]*domain.Message, time.Duration, error) {
	own, err := e.own(ctx, t)
	if err != nil || own.paused {
		return nil, 0, err // paused: long-polls wait for the resume's wake-up
	}
	set := fillSettings(own.settings, e.defaults)
	now := e.now()
	take := func(k int) ([]*store.Record, error) {
		p := &store.MessageLeaseParams{Topic: t.name, Now: now, Max: k, LeaseFor: lease.Milliseconds(), Token: token()}
		if e.dueNext != nil {
			res, err := e.dueNext.MessageLeaseDueNext(ctx, p)
			if err != nil {
				return nil, err
			}
			e.armReported(t, res, now)
			return res.Records, nil
		}
		if e.due != nil {
			return e.due.MessageLeaseDue(ctx, p)
		}
		return e.st.MessageLease(ctx, p)
	}
	var recs []*store.Record
	var since int64 // start of the throttled period, 0 if none
	var retry time.Duration
	if rl := set.RateLimit; rl != nil {
		var granted int
		recs, granted, retry, err = e.gate.admit(ctx, t, n, *rl, now, take)
		if err == nil {
			since = t.throttle(now, n, granted, len(recs))
		}
	} else {
		recs, err = take(n)
	}
	if err != nil {
		e.events.storeError("lease")
		return nil, 0, storeErr("lease", "from topic "+t.name, err)
	}
	if len(recs) == 0 {
		return nil, retry, nil
	}
	var until int64 // the store computed each lease's end on its clock
	for _, r := range recs {
		until = max(until, r.LeaseUntil)
	}
	e.dispatcher.armExpire(until)
	detail := e.events.wants(EventMessageLeased)
	out := make([]*domain.Message, len(recs))
	for i, r := range recs {
		// Lateness counts from the due time, or from the send for messages
		// sent with a due time in the past (they were never late); the
		// part the rate limit held the message back is reported apart.
		// Measured from the lease's own stamp (UpdatedAt: the store's now
		// when it leased, on the clock that judged the message due), not
		// from our now, read before the call: on a store with its own
		// clock that reading is a round trip earlier and an estimate, and
		// on-time deliveries counted as early (D8).
		at, from := e.local(r.UpdatedAt), e.local(max64(r.DueAt, r.CreatedAt))
		late := time.Duration(at-from) * time.Millisecond
		if since != 0 {
			held := time.Duration(at-max64(from, since)) * time.Millisecond
			held = min(max(held, 0), late)
			e.events.emit(Event{Kind: EventThrottled, Topic: t.name, Held: held})
			late -= held
		}
		e.events.emit(Event{Kind: EventDelivered, Topic: t.name, Lateness: late})
		out[i] = toMessage(r, now)
		if detail {
			e.events.emit(Event{Kind: EventMessageLeased, Topic: t.name, Message: out[i]})
		}
	}
	return out, 0, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Ack implements domain.Queue.
func (e *Engine) Ack(ctx context.Context, topic, id, receipt string) error {
	if err := validateRef(topic, id, receipt); err != nil {
		return err
	}
	var err error
	if e.groupWrites {
		var errs []error
		if errs, err = e.ackMany(ctx, topic, []store.AckItem{{ID: id, Receipt: receipt}}); err == nil {
			err = errs[0]
		}
	} else {
		err = e.st.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: id, Receipt: receipt, Now: e.now()})
	}
	if errors.Is(err, store.ErrConflict) && e.ackedBy(ctx, topic, id, receipt) {
		return nil // a retry of an ack that was done: counted and announced then
	}
	if err != nil {
		return storeErr("ack", msgRef(topic, id), err)
	}
	e.events.count(EventAcked, topic, 1)
	e.events.emit(Event{Kind: EventMessageAcked, Topic: topic, ID: id})
	return nil
}

// AckBatch implements domain.Queue.
func (e *Engine) AckBatch(ctx context.Context, topic string, acks []domain.AckRequest) ([]error, error) {
	if err := domain.ValidateTopic(topic); err != nil {
		return nil, err
	}
	if len(acks) == 0 || len(acks) > domain.MaxBatch {
		return nil, domain.Invalid("acks", "must have 1 to %d items", domain.MaxBatch)
	}
	out := make([]error, len(acks))
	items := make([]store.AckItem, 0, len(acks))
	slot := make([]int, 0, len(acks))
	for i, a := range acks {
		if err := validateRef(topic, a.ID, a.Receipt); err != nil {
			out[i] = err
			continue
		}
		items = append(items, store.AckItem{ID: a.ID, Receipt: a.Receipt})
		slot = append(slot, i)
	}
	if len(items) == 0 {
		return out, nil
	}
	errs, err := e.ackMany(ctx, topic, items)
	if err != nil {
		return nil, storeErr("ack", "messages of "+topic, err)
	}
	n := 0
	detail := e.events.wants(EventMessageAcked)
	done := e.ackedByMany(ctx, topic, items, errs)
	for i, err := range errs {
		if done != nil && done[i] {
			continue // a retry of an ack that was done: counted then
		}
		out[slot[i]] = storeErr("ack", msgRef(topic, items[i].ID), err)
		if err == nil {
			n++
			if detail {
				e.events.emit(Event{Kind: EventMessageAcked, Topic: topic, ID: items[i].ID, Batch: true})
			}
		}
	}
	e.events.count(EventAcked, topic, n)
	return out, nil
}

// ackedByLookups bounds the concurrent reads of ackedByMany.
const ackedByLookups = 8

// ackedByMany is ackedBy for each item whose ack was a conflict (errs[i]),
// read concurrently; nil when none was. A retried batch whose first try
// landed is all conflicts, and one read after another was a round trip
// per item on a networked store (1,000 in a row for a full batch).
func (e *Engine) ackedByMany(ctx context.Context, topic string, items []store.AckItem, errs []error) []bool {
	var conflicts []int
	for i, err := range errs {
		if errors.Is(err, store.ErrConflict) {
			conflicts = append(conflicts, i)
		}
	}
	if len(conflicts) == 0 {
		return nil // the usual batch: no read, no allocation
	}
	done := make([]bool, len(items))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(ackedByLookups, len(conflicts)) {
		wg.Go(func() {
			for i := range next {
				done[i] = e.ackedBy(ctx, topic, items[i].ID, items[i].Receipt)
			}
		})
	}
	for _, i := range conflicts {
		next <- i
	}
	close(next)
	wg.Wait()
	return done
}

// ackedBy reports whether the message was acked with this receipt: a
// client retrying an ack whose answer it lost (a timeout, a dropped
// connection, a server that went down after the write) is answered as the
// first try was, not "conflict", which would tell it the message was
// handed out again. The acked tombstone keeps the receipt that acked it;
// a receipt of another delivery (an earlier one, or a lease a crash undid
// and handed out again) is still a conflict. Only a conflict pays for this
// read.
func (e *Engine) ackedBy(ctx context.Context, topic, id, receipt string) bool {
	rec, err := e.st.MessageGet(ctx, topic, id)
	return err == nil && rec.State == store.StateAcked && rec.Receipt == receipt
}

// Nack implements domain.Queue.
func (e *Engine) Nack(ctx context.Context, topic, id, receipt string, req domain.NackRequest) (*domain.Message, error) {
	if err := validateRef(topic, id, receipt); err != nil {
		return nil, err
	}
	if req.HasDelay {
		if req.Dead {
			return nil, domain.Invalid("delay", "cannot be set on a nack to dead letters")
		}
		if err := e.limits.CheckDelay(req.Delay, "delay"); err != nil {
			return nil, err
		}
	}
	t := e.topic(topic)
	delay := req.Delay
	if !req.HasDelay && !req.Dead {
		// The topic's backoff for this failure: the message's failures
		// so far are read first (a nack with its own delay, or to dead
		// letters, skips the read: the store checks the lease itself).
		cur, err := e.st.MessageGet(ctx, topic, id)
		if err != nil {
			return nil, storeErr("nack", msgRef(topic, id), err)
		}
		if cur.State != store.StateInflight || cur.Receipt != receipt {
			if nackedBy(cur, receipt, truncateReason(req.Reason), req.Dead) {
				return toMessage(cur, e.storeNow()), nil // a retry of a nack that was done
			}
			return nil, storeErr("nack", msgRef(topic, id), store.ErrConflict)
		}
		set, err := e.settings(ctx, t)
		if err != nil {
			return nil, err
		}
		delay = backoff(set.Backoff, int(cur.Failures)+1, rand.Float64()) // #nosec G404 -- retry jitter, not a secret
	}
	now := e.now()
	// Rounded up: a sub-millisecond delay never makes the retry early.
	retryDelay := (delay + time.Millisecond - 1).Milliseconds()
	reason := truncateReason(req.Reason)
	rec, err := e.st.MessageNack(ctx, &store.MessageNackParams{Topic: topic, ID: id, Receipt: receipt, Now: now, RetryDelay: retryDelay, Error: reason, Final: req.Dead})
	if errors.Is(err, store.ErrConflict) {
		cur, gerr := e.st.MessageGet(ctx, topic, id)
		switch {
		case gerr == nil && nackedBy(cur, receipt, reason, req.Dead):
			return toMessage(cur, e.storeNow()), nil // a retry of a nack that was done: counted then
		case errors.Is(gerr, store.ErrNotFound):
			// Cancelled since the store refused the nack: answered as a
			// nack after the cancel, not as one of a message still there.
			err = gerr
		}
	}
	if err != nil {
		return nil, storeErr("nack", msgRef(topic, id), err)
	}
	e.events.count(EventNacked, topic, 1)
	switch rec.State {
	case store.StateDead:
		e.events.count(EventDied, topic, 1)
	case store.StateReady:
		t.notify()
	default:
		e.dispatcher.armPromote(t, rec.DueAt)
	}
	m := toMessage(rec, e.storeNow())
	e.events.emit(Event{Kind: EventMessageNacked, Topic: topic, Message: m, Reason: reason})
	return m, nil
}

// nackedBy reports whether rec shows the delivery receipt names ended by a
// nack with this reason (to dead letters if dead): a client retrying a nack
// whose answer it lost is answered with the message as it now is, not
// "conflict", and the failure is not counted twice. A failed record keeps
// its failed delivery's receipt until the next lease (store.Record), so
// the checks are: that receipt, not leased or acked since, failed at
// least once, and its last error this nack's reason — which a lease that
// ran out never leaves unless the reason is the expiry's own, so that one
// is never taken for a retry. Only a conflict pays for this.
func nackedBy(rec *store.Record, receipt, reason string, dead bool) bool {
	if rec.Receipt != receipt || rec.Failures == 0 || rec.LastError != reason || reason == leaseExpiredReason {
		return false
	}
	switch rec.State {
	case store.StateDead:
		return true
	case store.StateScheduled, store.StateReady:
		return !dead
	}
	return false
}

// leaseExpiredReason is the last error the stores give a message whose
// lease ran out (store.Store's LeaseExpire contract).
const leaseExpiredReason = "lease expired"

// Extend implements domain.Queue.
func (e *Engine) Extend(ctx context.Context, topic, id, receipt string, lease time.Duration) (*domain.Message, error) {
	if err := validateRef(topic, id, receipt); err != nil {
		return nil, err
	}
	if lease <= 0 || lease > MaxLease {
		return nil, domain.Invalid("lease", "must be between 1ms and %s", MaxLease)
	}
	rec, err := e.st.MessageExtend(ctx, &store.MessageExtendParams{Topic: topic, ID: id, Receipt: receipt, Now: e.now(), LeaseFor: lease.Milliseconds()})
	if err != nil {
		return nil, storeErr("extend", msgRef(topic, id), err)
	}
	e.dispatcher.armExpire(rec.LeaseUntil)
	return toMessage(rec, e.storeNow()), nil
}

// backoff is the delay before retry n (n ≥ 1): Initial·Multiplier^(n-1)
// capped at Max, then spread by ±Jitter using u in [0,1).
func backoff(b domain.Backoff, n int, u float64) time.Duration {
	d := float64(b.Initial)
	for i := 1; i < n && d < float64(b.Max); i++ {
		d *= b.Multiplier
	}
	d = min(d, float64(b.Max))
	d *= 1 + b.Jitter*(2*u-1)
	return max(time.Duration(d), 0)
}

const maxReason = 2048

func truncateReason(s string) string {
	if len(s) > maxReason {
		return s[:maxReason]
	}
	return s
}

func validateRef(topic, id, receipt string) error {
	if err := domain.ValidateTopic(topic); err != nil {
		return err
	}
	if err := domain.ValidateID(id); err != nil {
		return err
	}
	if receipt == "" {
		return domain.Invalid("receipt", "must not be empty")
	}
	if len(receipt) > 256 {
		return domain.Invalid("receipt", "is too long")
	}
	return nil
}
