package engine

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// Send implements domain.Queue.
func (e *Engine) Send(ctx context.Context, topic string, req domain.SendRequest) (*domain.Message, error) {
	res, err := e.SendBatch(ctx, topic, []domain.SendRequest{req})
	if err != nil {
		return nil, err
	}
	return res[0].Message, res[0].Err
}

// SendBatch implements domain.Queue. Valid items are inserted in one
// durable store write; invalid ones get their error in place.
func (e *Engine) SendBatch(ctx context.Context, topicName string, reqs []domain.SendRequest) ([]domain.SendResult, error) {
	return e.sendBatch(ctx, topicName, reqs, true)
}

// sendBatch is SendBatch; limit false skips the topic limit (recurring
// schedules, which only an admin on "*" creates).
func (e *Engine) sendBatch(ctx context.Context, topicName string, reqs []domain.SendRequest, limit bool) ([]domain.SendResult, error) {
	if err := domain.ValidateTopic(topicName); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, domain.Invalid("messages", "must not be empty")
	}
	if len(reqs) > domain.MaxBatch {
		return nil, domain.Invalid("messages", "has %d items, the limit is %d", len(reqs), domain.MaxBatch)
	}
	if e.isClosing() {
		return nil, domain.ErrUnavailable
	}
	// The checks that need neither the clock nor the topic come first: a
	// batch that fails them all touches no topic state.
	results := make([]domain.SendResult, len(reqs))
	valid := 0
	for i, r := range reqs {
		if results[i].Err = e.limits.CheckSend(r); results[i].Err == nil {
			valid++
		}
	}
	if valid == 0 {
		return results, nil
	}
	t := e.topic(topicName)
	set, err := e.settings(ctx, t)
	if err != nil {
		return nil, err
	}
	now := e.now()
	msgs := make([]store.InsertMessage, 0, valid)
	slot := make([]int, 0, valid) // msgs[i] answers results[slot[i]]
	for i, r := range reqs {
		if results[i].Err != nil {
			continue
		}
		m, err := e.prepare(r, now, set)
		if err != nil {
			results[i].Err = err
			continue
		}
		msgs = append(msgs, m)
		slot = append(slot, i)
	}
	if len(msgs) == 0 {
		return results, nil
	}
	if limit {
		if err := e.admitTopic(ctx, topicName); err != nil {
			return nil, err
		}
	}
	ins, err := e.insert(ctx, t, now, msgs)
	if err != nil {
		e.events.storeError("send")
		return nil, storeErr("send", "to topic "+topicName, err)
	}
	sn := e.storeNow()
	detail := e.events.wants(EventMessageSent)
	for i, r := range ins {
		m := toMessage(r.Record, sn)
		m.Duplicate = r.Duplicate
		if !m.Duplicate {
			// The store need not copy what was sent into its answer.
			m.Payload, m.Headers = sentBody(msgs[i])
		}
		results[slot[i]].Message = m
		if detail && !m.Duplicate {
			e.events.emit(Event{Kind: EventMessageSent, Topic: topicName, Message: m})
		}
	}
	return results, nil
}

// sentBody is a new message's payload and headers as a store answers
// them (nil when empty): the request's own, not copies.
func sentBody(m store.InsertMessage) ([]byte, map[string]string) {
	p, h := m.Payload, m.Headers
	if len(p) == 0 {
		p = nil
	}
	if len(h) == 0 {
		h = nil
	}
	return p, h
}

// afterInsert wakes consumers for messages that are ready at once and arms
// the topic's promotion for the earliest scheduled one.
func (e *Engine) afterInsert(t *topic, ins []store.InsertResult) {
	var sent, ready int
	var earliest int64
	for _, r := range ins {
		if r.Duplicate {
			continue
		}
		sent++
		if r.Record.State == store.StateReady {
			ready++
		} else if earliest == 0 || r.Record.DueAt < earliest {
			earliest = r.Record.DueAt
		}
	}
	if sent > 0 {
		e.events.count(EventSent, t.name, sent)
	}
	if ready > 0 {
		t.notifyN(ready)
	}
	if earliest != 0 {
		e.dispatcher.armPromote(t, earliest)
	}
}

// prepare resolves one send that passed Limits.CheckSend: its due time
// (checked against the clock), id and max attempts.
func (e *Engine) prepare(r domain.SendRequest, now int64, set domain.TopicSettings) (store.InsertMessage, error) {
	var m store.InsertMessage
	due, err := e.dueAt(r.When, now)
	if err != nil {
		return m, err
	}
	id, generated := r.ID, r.ID == ""
	if generated {
		id = e.ids.Next(now)
	}
	attempts := r.MaxAttempts
	switch {
	case attempts == 0:
		attempts = set.MaxAttempts
	case attempts < 0 || attempts > MaxMaxAttempts:
		return m, domain.Invalid("max_attempts", "must be between 1 and %d", MaxMaxAttempts)
	}
	// #nosec G115 -- attempts is in [1, MaxMaxAttempts] here: checked above, or a validated topic setting
	return store.InsertMessage{ID: id, Payload: r.Payload, Headers: r.Headers, DueAt: due.at, Relative: due.relative, Delay: due.delay, MaxAttempts: int32(attempts), Generated: generated,
		Priority: uint8(r.Priority)}, nil // #nosec G115 -- in [0, 255]: Limits.CheckSend checked it
}

// dueTime is a validated due time: absolute (deliver_at) or a delay that the
// store adds to its own now, so that on a shared store the due time comes
// from the store's clock rather than this server's.
type dueTime struct {
	at       int64
	relative bool
	delay    int64 // ms
}

// dueAt resolves a When that passed Limits.CheckWhen, and checks
// DeliverAt against the clock. A deliver_at in the past means due now, and
// is kept as given so it sorts before later dues (release order is by due
// time, then send order).
func (e *Engine) dueAt(w domain.When, now int64) (dueTime, error) {
	if w.DeliverAt.IsZero() {
		// Round up so a sub-millisecond delay never makes a message early.
		return dueTime{relative: true, delay: (w.Delay + time.Millisecond - 1).Milliseconds()}, nil
	}
	at := w.DeliverAt.UnixMilli()
	if w.DeliverAt.Sub(time.UnixMilli(at)) > 0 {
		at++ // round up sub-millisecond precision: never early
	}
	if at-now > e.limits.MaxDelay.Milliseconds() {
		return dueTime{}, domain.Invalid("deliver_at", "%s is beyond the maximum delay of %s", w.DeliverAt.UTC().Format(time.RFC3339), e.limits.MaxDelay)
	}
	if at < 0 {
		return dueTime{}, domain.Invalid("deliver_at", "is before 1970")
	}
	return dueTime{at: at}, nil
}
