package engine

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// Get implements domain.Queue.
func (e *Engine) Get(ctx context.Context, topic, id string) (*domain.Message, error) {
	if err := validateMsg(topic, id); err != nil {
		return nil, err
	}
	rec, err := e.st.MessageGet(ctx, topic, id)
	if err != nil {
		return nil, storeErr("get", msgRef(topic, id), err)
	}
	return toMessage(rec, e.storeNow()), nil
}

// Cancel implements domain.Queue.
func (e *Engine) Cancel(ctx context.Context, topic, id string) (*domain.Message, error) {
	if err := validateMsg(topic, id); err != nil {
		return nil, err
	}
	now := e.now()
	rec, err := e.st.MessageCancel(ctx, &store.MessageCancelParams{Topic: topic, ID: id, Now: now})
	if err != nil {
		return nil, storeErr("cancel", msgRef(topic, id), err)
	}
	e.events.count(EventCancelled, topic, 1)
	m := toMessage(rec, e.storeNow())
	e.events.emit(Event{Kind: EventMessageCancelled, Topic: topic, Message: m})
	return m, nil
}

// Reschedule implements domain.Queue.
func (e *Engine) Reschedule(ctx context.Context, topic, id string, when domain.When) (*domain.Message, error) {
	if err := validateMsg(topic, id); err != nil {
		return nil, err
	}
	if err := e.limits.CheckWhen(when); err != nil {
		return nil, err
	}
	now := e.now()
	due, err := e.dueAt(when, now)
	if err != nil {
		return nil, err
	}
	rec, err := e.st.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: topic, ID: id, DueAt: due.at, Relative: due.relative, Delay: due.delay, Now: now})
	if err != nil {
		return nil, storeErr("reschedule", msgRef(topic, id), err)
	}
	t := e.topic(topic)
	if rec.State == store.StateReady {
		t.notify()
	} else {
		e.dispatcher.armPromote(t, rec.DueAt)
	}
	m := toMessage(rec, e.storeNow())
	e.events.emit(Event{Kind: EventMessageRescheduled, Topic: topic, Message: m})
	return m, nil
}

func validateMsg(topic, id string) error {
	if err := domain.ValidateTopic(topic); err != nil {
		return err
	}
	return domain.ValidateID(id)
}

// toMessage converts a record for callers. A scheduled record already due
// by now (the store's time) reads as ready: it is, and promotion is about
// to say so.
func toMessage(r *store.Record, now int64) *domain.Message {
	m := &domain.Message{
		Topic:       r.Topic,
		ID:          r.ID,
		Payload:     r.Payload,
		Headers:     r.Headers,
		DeliverAt:   time.UnixMilli(r.DueAt).UTC(), // 0 is 1970, not "unset"
		State:       publicState(r.State),
		Attempt:     int(r.Deliveries),
		Failures:    int(r.Failures),
		MaxAttempts: int(r.MaxAttempts),
		LastError:   r.LastError,
		Priority:    int(r.Priority),
		CreatedAt:   msTime(r.CreatedAt),
		UpdatedAt:   msTime(r.UpdatedAt),
	}
	if m.State == domain.StateScheduled && r.DueAt <= now {
		m.State = domain.StateReady
	}
	if r.State == store.StateInflight {
		m.Receipt = r.Receipt
		m.LeaseExpiresAt = msTime(r.LeaseUntil)
	}
	return m
}

func publicState(s store.State) domain.State {
	switch s {
	case store.StateScheduled:
		return domain.StateScheduled
	case store.StateReady:
		return domain.StateReady
	case store.StateInflight:
		return domain.StateInflight
	case store.StateDead:
		return domain.StateDead
	case store.StateAcked:
		return domain.StateAcked
	}
	return domain.State(s.String())
}
