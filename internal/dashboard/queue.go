package dashboard

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// Queue returns q with a recording layer: every successful call that
// changes a message adds an event to that message's history (shown on the
// message page) and keeps the fallback Upcoming counts. Results and errors
// pass through unchanged. Give the result to the API server and to the
// dashboard, so both are recorded:
//
//	q := rec.Queue(eng)
//	server.Config{Queue: q, Dashboard: dashboard.New(dashboard.Config{Queue: q, …})}
func (r *Recorder) Queue(q domain.Queue) domain.Queue { return &recordingQueue{Queue: q, r: r} }

// recordingQueue decorates a domain.Queue; see Recorder.Queue.
type recordingQueue struct {
	domain.Queue
	r *Recorder
}

// Unwrap returns the decorated queue (the dashboard looks for an
// UpcomingSource on it).
func (q *recordingQueue) Unwrap() domain.Queue { return q.Queue }

// track records an event of a message and moves its count in the
// fallback Upcoming source: it is counted at m's due time while m waits
// in state scheduled, and not counted otherwise. m needs Topic and ID.
func (q *recordingQueue) track(m *domain.Message, what, detail string) {
	q.trackEvent(m, Event{What: what, Detail: detail})
}

// trackEvent is track with the event given (its At is set here).
func (q *recordingQueue) trackEvent(m *domain.Message, ev Event) {
	now := q.r.cfg.Now()
	ev.At = now
	var due time.Time
	if m.State == domain.StateScheduled && m.DeliverAt.After(now) && m.DeliverAt.Sub(now) <= q.r.cfg.Horizon {
		due = m.DeliverAt
	}
	prev := q.r.msgs.add(m.Topic, m.ID, ev, due)
	if !prev.Equal(due) {
		q.r.recordDue(m.Topic, prev, due, now)
	}
}

func (q *recordingQueue) sent(m *domain.Message) {
	if m == nil || m.Duplicate {
		return
	}
	q.trackEvent(m, Event{What: "sent", lazy: detailDue, lazyAt: m.DeliverAt})
}

func (q *recordingQueue) leased(m *domain.Message) {
	q.trackEvent(m, Event{What: "leased", lazy: detailLease, lazyAt: m.LeaseExpiresAt, attempt: m.Attempt})
}

func (q *recordingQueue) Send(ctx context.Context, topic string, req domain.SendRequest) (*domain.Message, error) {
	m, err := q.Queue.Send(ctx, topic, req)
	if err == nil {
		q.sent(m)
	}
	return m, err
}

func (q *recordingQueue) SendBatch(ctx context.Context, topic string, reqs []domain.SendRequest) ([]domain.SendResult, error) {
	res, err := q.Queue.SendBatch(ctx, topic, reqs)
	for _, r := range res {
		if r.Err == nil {
			q.sent(r.Message)
		}
	}
	return res, err
}

func (q *recordingQueue) Cancel(ctx context.Context, topic, id string) (*domain.Message, error) {
	m, err := q.Queue.Cancel(ctx, topic, id)
	if err == nil && m != nil {
		gone := *m
		gone.State = domain.StateCancelled
		q.track(&gone, "cancelled", "was "+string(m.State))
	}
	return m, err
}

func (q *recordingQueue) Reschedule(ctx context.Context, topic, id string, when domain.When) (*domain.Message, error) {
	m, err := q.Queue.Reschedule(ctx, topic, id, when)
	if err == nil && m != nil {
		q.track(m, "rescheduled", "due "+fmtTime(m.DeliverAt))
	}
	return m, err
}

func (q *recordingQueue) Lease(ctx context.Context, topic string, req domain.LeaseRequest) ([]*domain.Message, error) {
	ms, err := q.Queue.Lease(ctx, topic, req)
	for _, m := range ms {
		q.leased(m)
	}
	return ms, err
}

func (q *recordingQueue) Ack(ctx context.Context, topic, id, receipt string) error {
	err := q.Queue.Ack(ctx, topic, id, receipt)
	if err == nil {
		q.track(&domain.Message{Topic: topic, ID: id, State: domain.StateAcked}, "acked", "")
	}
	return err
}

func (q *recordingQueue) AckBatch(ctx context.Context, topic string, acks []domain.AckRequest) ([]error, error) {
	errs, err := q.Queue.AckBatch(ctx, topic, acks)
	for i, e := range errs {
		if e == nil && i < len(acks) {
			q.track(&domain.Message{Topic: topic, ID: acks[i].ID, State: domain.StateAcked}, "acked", "batch")
		}
	}
	return errs, err
}

func (q *recordingQueue) Nack(ctx context.Context, topic, id, receipt string, req domain.NackRequest) (*domain.Message, error) {
	m, err := q.Queue.Nack(ctx, topic, id, receipt, req)
	if err == nil && m != nil {
		if m.State == domain.StateDead {
			q.track(m, "nacked, now dead", req.Reason)
		} else {
			q.track(m, "nacked", joinNonEmpty("; ", "retry at "+fmtTime(m.DeliverAt), req.Reason))
		}
	}
	return m, err
}

func (q *recordingQueue) DeadReplay(ctx context.Context, topic, id string) (*domain.Message, error) {
	m, err := q.Queue.DeadReplay(ctx, topic, id)
	if err == nil && m != nil {
		q.track(m, "replayed", "from dead letters")
	}
	return m, err
}

func (q *recordingQueue) DeadDelete(ctx context.Context, topic, id string) error {
	err := q.Queue.DeadDelete(ctx, topic, id)
	if err == nil {
		q.track(&domain.Message{Topic: topic, ID: id, State: domain.StateDead}, "purged", "from dead letters")
	}
	return err
}
