package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// bulkChunk is how many messages a bulk cancel or reschedule reads from
// the store's index at a time: each message is then changed by its own
// store call, so a bulk change of a million messages never holds the
// store (or a topic's lock) for longer than one message's change.
const bulkChunk = 500

var storeStates = map[domain.State]store.State{
	domain.StateScheduled: store.StateScheduled,
	domain.StateReady:     store.StateReady,
	domain.StateInflight:  store.StateInflight,
	domain.StateDead:      store.StateDead,
}

// listParams checks a filter and turns it into the store's terms.
func listParams(topic string, f domain.MessageFilter) (store.MessageListParams, error) {
	p := store.MessageListParams{Topic: topic, DueFrom: math.MinInt64, DueTo: math.MaxInt64}
	if err := domain.ValidateTopic(topic); err != nil {
		return p, err
	}
	st, ok := storeStates[f.State]
	if !ok {
		return p, domain.Invalid("state", "must be scheduled, ready, inflight or dead, got %q", f.State)
	}
	p.State = st
	if st != store.StateScheduled && st != store.StateReady && (!f.DueAfter.IsZero() || !f.DueBefore.IsZero()) {
		return p, domain.Invalid("due_after", "due-time bounds apply to scheduled and ready messages, not %s ones", f.State)
	}
	if !f.DueAfter.IsZero() {
		p.DueFrom = f.DueAfter.UnixMilli()
	}
	if !f.DueBefore.IsZero() {
		p.DueTo = f.DueBefore.UnixMilli()
	}
	return p, nil
}

// ListMessages implements domain.TopicAdmin.
func (e *Engine) ListMessages(ctx context.Context, topic string, req domain.ListRequest) (*domain.MessagePage, error) {
	p, err := listParams(topic, req.Filter)
	if err != nil {
		return nil, err
	}
	p.Limit = cmp.Or(req.Limit, domain.DefaultListLimit)
	if p.Limit < 1 || p.Limit > domain.MaxListLimit {
		return nil, domain.Invalid("limit", "must be between 1 and %d", domain.MaxListLimit)
	}
	if len(req.Cursor) > 1024 {
		return nil, domain.Invalid("cursor", "is not one this server made")
	}
	p.Cursor = req.Cursor
	recs, next, err := e.st.MessageList(ctx, &p)
	if err != nil {
		return nil, storeErr("list", "messages of "+topic, err)
	}
	now := e.storeNow()
	page := &domain.MessagePage{Messages: make([]*domain.Message, len(recs)), Next: next}
	for i, r := range recs {
		page.Messages[i] = toMessage(r, now)
	}
	return page, nil
}

// bulkFilters checks a bulk filter: scheduled, ready, or both when the
// state is empty. Inflight messages are a consumer's, dead ones have
// their own operations.
func bulkFilters(topic string, f domain.MessageFilter) ([]store.MessageListParams, error) {
	states := []domain.State{f.State}
	switch f.State {
	case "":
		states = []domain.State{domain.StateScheduled, domain.StateReady}
	case domain.StateScheduled, domain.StateReady:
	case domain.StateInflight:
		return nil, domain.Invalid("filter.state", "inflight messages are not changed in bulk: a consumer holds them (cancel one by id, or let its lease end)")
	case domain.StateDead:
		return nil, domain.Invalid("filter.state", "dead messages are replayed or purged with the /dead operations")
	default:
		return nil, domain.Invalid("filter.state", "must be scheduled or ready, got %q", f.State)
	}
	var out []store.MessageListParams
	for _, s := range states {
		f.State = s
		p, err := listParams(topic, f)
		if err != nil {
			return nil, err
		}
		p.Limit = bulkChunk
		out = append(out, p)
	}
	return out, nil
}

// bulk applies fn to every message the filters select, a chunk at a time,
// and counts those fn changed. A message that moved on meanwhile (leased,
// acked, cancelled by someone else) is skipped.
func (e *Engine) bulk(ctx context.Context, topic, op string, ps []store.MessageListParams, fn func(r *store.Record) (bool, error)) (int, error) {
	n := 0
	for _, p := range ps {
		for {
			recs, next, err := e.st.MessageList(ctx, &p)
			if err != nil {
				return n, storeErr(op, "messages of "+topic, err)
			}
			for _, r := range recs {
				ok, err := fn(r)
				switch {
				case errors.Is(err, domain.ErrNotFound), errors.Is(err, domain.ErrConflict):
				case err != nil:
					return n, err
				case ok:
					n++
				}
			}
			if next == "" {
				break
			}
			p.Cursor = next
		}
	}
	return n, nil
}

// CancelMessages implements domain.TopicAdmin. A message leased between
// the listing and its cancel is cancelled like any other (the store's
// cancel takes inflight messages too); the window is one store call.
func (e *Engine) CancelMessages(ctx context.Context, topic string, f domain.MessageFilter) (int, error) {
	ps, err := bulkFilters(topic, f)
	if err != nil {
		return 0, err
	}
	return e.bulk(ctx, topic, "cancel", ps, func(r *store.Record) (bool, error) {
		_, err := e.Cancel(ctx, topic, r.ID)
		return err == nil, err
	})
}

// RescheduleMessages implements domain.TopicAdmin. A delay is resolved
// once, at the start, so every message gets the same due time and one
// moved further along its index is recognised (its due time is the new
// one) rather than moved again.
func (e *Engine) RescheduleMessages(ctx context.Context, topic string, f domain.MessageFilter, when domain.When) (int, error) {
	ps, err := bulkFilters(topic, f)
	if err != nil {
		return 0, err
	}
	if err := e.limits.CheckWhen(when); err != nil {
		return 0, err
	}
	at := when.DeliverAt
	if at.IsZero() {
		at = time.UnixMilli(e.now()).Add(when.Delay)
	}
	due := at.UnixMilli()
	abs := domain.When{DeliverAt: at}
	return e.bulk(ctx, topic, "reschedule", ps, func(r *store.Record) (bool, error) {
		if r.DueAt == due {
			return false, nil
		}
		_, err := e.Reschedule(ctx, topic, r.ID, abs)
		return err == nil, err
	})
}

// PauseTopic implements domain.TopicAdmin. The flag is stored with the
// topic's settings, so every server sharing the store sees it (at once
// where the store announces settings changes, else by the safety sweep)
// and it survives restarts.
func (e *Engine) PauseTopic(ctx context.Context, name string, paused bool) (*domain.TopicInfo, error) {
	if err := domain.ValidateTopic(name); err != nil {
		return nil, err
	}
	if err := e.admitTopic(ctx, name); err != nil {
		return nil, err
	}
	own, err := e.ownStored(ctx, name)
	if err != nil {
		return nil, err
	}
	own.paused = paused
	if err := e.putOwn(ctx, name, own); err != nil {
		return nil, err
	}
	if !paused {
		e.topic(name).notify() // long-polls that waited out the pause look again
	}
	e.events.emit(Event{Kind: EventTopicSettingsChanged, Topic: name})
	return e.Topic(ctx, name)
}

// DeleteTopic implements domain.TopicAdmin.
func (e *Engine) DeleteTopic(ctx context.Context, name string) error {
	if err := domain.ValidateTopic(name); err != nil {
		return err
	}
	err := e.st.TopicDelete(ctx, name)
	if errors.Is(err, store.ErrConflict) {
		what := "messages"
		if rec, gerr := e.st.TopicGet(ctx, name); gerr == nil {
			c := rec.Counts
			what = fmt.Sprintf("%d scheduled, %d ready, %d inflight and %d dead messages", c.Scheduled, c.Ready, c.Inflight, c.Dead)
		}
		return &opError{kind: domain.ErrConflict, cause: err, msg: fmt.Sprintf(
			"topic %s holds %s: only an empty topic can be deleted (cancel its messages, let consumers finish, and purge its dead letters first)", name, what)}
	}
	if err != nil {
		return storeErr("delete", "topic "+name, err)
	}
	// What this engine cached goes too: the topic has default settings now.
	if t := e.lookup(name); t != nil {
		t.mu.Lock()
		t.cached = &ownState{}
		t.setEpoch = e.settingsEpoch.Add(1)
		t.mu.Unlock()
		t.notify() // a long-poll waiting out a pause looks again
	}
	e.events.emit(Event{Kind: EventTopicSettingsChanged, Topic: name})
	return nil
}
