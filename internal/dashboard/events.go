package dashboard

import (
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
)

// Subscription subscribes the Recorder to the engine's events: the
// counting ones for rates and lateness, the message ones for histories
// and the fallback Upcoming counts. Give it to engine.Config.Subscriptions
// so nothing from the start is missed.
func (r *Recorder) Subscription() engine.Subscription {
	return engine.Subscription{Kinds: engine.CountingEvents | engine.MessageEvents, Handle: r.HandleEvent}
}

// HandleEvent records one engine event.
func (r *Recorder) HandleEvent(ev engine.Event) {
	m := ev.Message
	switch ev.Kind {
	case engine.EventSent:
		r.add(ev.Topic, CountSent, ev.N)
	case engine.EventDelivered:
		r.delivered(ev.Topic, ev.Lateness)
	case engine.EventThrottled:
		r.throttled(ev.Topic, ev.Held)
	case engine.EventAcked:
		r.add(ev.Topic, CountAcked, ev.N)
	case engine.EventNacked:
		r.add(ev.Topic, CountNacked, ev.N)
	case engine.EventExpired:
		r.add(ev.Topic, CountExpired, ev.N)
	case engine.EventDied:
		r.add(ev.Topic, CountDied, ev.N)
	case engine.EventCancelled:
		r.add(ev.Topic, CountCancelled, ev.N)
	case engine.EventMessageSent:
		if !m.Duplicate {
			r.track(m.Topic, m.ID, m.State, m.DeliverAt, Event{What: "sent", lazy: detailDue, lazyAt: m.DeliverAt})
		}
	case engine.EventMessageLeased:
		r.track(m.Topic, m.ID, m.State, m.DeliverAt, Event{What: "leased", lazy: detailLease, lazyAt: m.LeaseExpiresAt, attempt: m.Attempt})
	case engine.EventMessageAcked:
		detail := ""
		if ev.Batch {
			detail = "batch"
		}
		r.track(ev.Topic, ev.ID, domain.StateAcked, time.Time{}, Event{What: "acked", Detail: detail})
	case engine.EventMessageNacked:
		if m.State == domain.StateDead {
			r.trackMessage(m, "nacked, now dead", ev.Reason)
		} else {
			r.trackMessage(m, "nacked", joinNonEmpty("; ", "retry at "+fmtTime(m.DeliverAt), ev.Reason))
		}
	case engine.EventMessageCancelled:
		r.track(m.Topic, m.ID, domain.StateCancelled, m.DeliverAt, Event{What: "cancelled", Detail: "was " + string(m.State)})
	case engine.EventMessageRescheduled:
		r.trackMessage(m, "rescheduled", "due "+fmtTime(m.DeliverAt))
	case engine.EventMessageReplayed:
		r.trackMessage(m, "replayed", "from dead letters")
	case engine.EventMessageDeleted:
		r.track(ev.Topic, ev.ID, domain.StateDead, time.Time{}, Event{What: "purged", Detail: "from dead letters"})
	}
}

func (r *Recorder) trackMessage(m *domain.Message, what, detail string) {
	r.track(m.Topic, m.ID, m.State, m.DeliverAt, Event{What: what, Detail: detail})
}

// track records an event of a message (its At is set here) and moves its
// count in the fallback Upcoming source: a message is counted at its due
// time while it waits in state scheduled, and not counted otherwise.
func (r *Recorder) track(topic, id string, state domain.State, due time.Time, ev Event) {
	now := r.cfg.Now()
	ev.At = now
	if r.cfg.NoUpcoming {
		r.msgs.add(topic, id, ev, time.Time{})
		return
	}
	if state != domain.StateScheduled || !due.After(now) || due.Sub(now) > r.cfg.Horizon {
		due = time.Time{}
	}
	prev := r.msgs.add(topic, id, ev, due)
	if !prev.Equal(due) {
		r.recordDue(topic, prev, due, now)
	}
}
