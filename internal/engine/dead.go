package engine

import (
	"cmp"
	"context"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

const (
	defaultDeadPage = 100
	maxDeadPage     = 1000
)

// DeadList implements domain.Queue.
func (e *Engine) DeadList(ctx context.Context, topic string, req domain.DeadListRequest) (*domain.DeadPage, error) {
	if err := domain.ValidateTopic(topic); err != nil {
		return nil, err
	}
	limit := cmp.Or(req.Limit, defaultDeadPage)
	if limit < 1 || limit > maxDeadPage {
		return nil, domain.Invalid("limit", "must be between 1 and %d", maxDeadPage)
	}
	if len(req.Cursor) > 1024 {
		return nil, domain.Invalid("cursor", "is not one this server made")
	}
	recs, next, err := e.st.DeadList(ctx, &store.DeadListParams{Topic: topic, Limit: limit, Cursor: req.Cursor})
	if err != nil {
		return nil, storeErr("list", "dead letters of "+topic, err)
	}
	now := e.now()
	page := &domain.DeadPage{Messages: make([]*domain.Message, len(recs)), Next: next}
	for i, r := range recs {
		page.Messages[i] = toMessage(r, now)
	}
	return page, nil
}

// DeadReplay implements domain.Queue.
func (e *Engine) DeadReplay(ctx context.Context, topic, id string) (*domain.Message, error) {
	if err := validateMsg(topic, id); err != nil {
		return nil, err
	}
	now := e.now()
	recs, err := e.st.DeadReplay(ctx, &store.DeadReplayParams{Topic: topic, ID: id, Now: now, Max: 1})
	if err != nil {
		return nil, storeErr("replay", "dead letter "+topic+"/"+id, err)
	}
	if len(recs) == 0 {
		return nil, storeErr("replay", "dead letter "+topic+"/"+id, store.ErrNotFound)
	}
	e.topic(topic).notify()
	m := toMessage(recs[0], now)
	e.events.emit(Event{Kind: EventMessageReplayed, Topic: topic, Message: m})
	return m, nil
}

// DeadReplayAll implements domain.Queue.
func (e *Engine) DeadReplayAll(ctx context.Context, topic string) (int, error) {
	if err := domain.ValidateTopic(topic); err != nil {
		return 0, err
	}
	total := 0
	for {
		recs, err := e.st.DeadReplay(ctx, &store.DeadReplayParams{Topic: topic, Now: e.now(), Max: maxDeadPage})
		total += len(recs)
		if err != nil {
			return total, storeErr("replay", "dead letters of "+topic, err)
		}
		if len(recs) > 0 {
			e.topic(topic).notify()
		}
		if len(recs) < maxDeadPage {
			return total, nil
		}
	}
}

// DeadDelete implements domain.Queue.
func (e *Engine) DeadDelete(ctx context.Context, topic, id string) error {
	if err := validateMsg(topic, id); err != nil {
		return err
	}
	n, err := e.st.DeadDelete(ctx, &store.DeadDeleteParams{Topic: topic, ID: id, Max: 1})
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err == nil {
		e.events.emit(Event{Kind: EventMessageDeleted, Topic: topic, ID: id})
	}
	return storeErr("delete", "dead letter "+topic+"/"+id, err)
}

// DeadPurge implements domain.Queue.
func (e *Engine) DeadPurge(ctx context.Context, topic string) (int, error) {
	if err := domain.ValidateTopic(topic); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := e.st.DeadDelete(ctx, &store.DeadDeleteParams{Topic: topic, Max: maxDeadPage})
		total += n
		if err != nil {
			return total, storeErr("purge", "dead letters of "+topic, err)
		}
		if n < maxDeadPage {
			return total, nil
		}
	}
}
