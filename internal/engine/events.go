package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// EventKind says what an Event reports.
type EventKind uint8

// Counting events (EventSent to EventScheduleMissed): one per operation,
// with Topic and N (or Lateness, Held, Op, Schedule). They cost no
// allocation; metrics and the dashboard's rates count them.
const (
	// EventSent: N messages accepted (duplicates excluded).
	EventSent EventKind = iota + 1
	// EventDelivered: one message handed out by Lease, with its release
	// lateness: the time it was handed out minus its due time, less the
	// part the topic's rate limit held it back (reported by EventThrottled
	// just before). Early deliveries never happen; lateness is never
	// negative.
	EventDelivered
	// EventThrottled: one message handed out while the topic was
	// throttled, with Held, the time its rate limit held it back: from the
	// later of its due time and the start of the topic's current throttled
	// period, to its release. A throttled period starts when a lease gets
	// fewer tokens than it asked for and uses them all (or gets none), and
	// ends with a lease that gets all it asked for or leaves tokens unused.
	EventThrottled
	// EventAcked: N acknowledgements.
	EventAcked
	// EventNacked: N consumer-reported failures.
	EventNacked
	// EventExpired: N leases ran out (also failures).
	EventExpired
	// EventDied: N messages moved to the dead-letter list.
	EventDied
	// EventCancelled: N cancels.
	EventCancelled
	// EventStoreError: a storage failure seen by the engine, in operation
	// Op; Topic is empty.
	EventStoreError
	// EventScheduleFired: this engine sent the message of a tick of
	// recurring schedule Schedule to Topic (N is 1; Lateness is the time
	// from the tick to the send). When several engines share a store, only
	// the one whose send was not a duplicate reports the tick.
	EventScheduleFired
	// EventScheduleMissed: N ticks of Schedule were not sent: ticks
	// collapsed into a later one after a pause in firing (the server or
	// every server was down), a tick that missed: skip dropped for being
	// more than domain.ScheduleGrace late, or a tick whose message the
	// limits refused. Collapsed ticks are reported by the engine that sent
	// the later tick; a skipped tick by each engine that skipped it.
	EventScheduleMissed
	// EventTopicSettingsChanged: SetTopicSettings stored new settings for
	// Topic on this engine (changes made through other engines sharing the
	// store are not reported).
	EventTopicSettingsChanged

	// Message events: one per message, with Message (or ID), made only
	// when a subscriber asks for them. Message is the engine's answer to
	// the call (the caller holds it too): read it during the call, never
	// keep or change it.

	// EventMessageSent: Message was accepted (not a duplicate), by a send
	// or a recurring schedule.
	EventMessageSent
	// EventMessageLeased: Message was handed out (Attempt, LeaseExpiresAt).
	EventMessageLeased
	// EventMessageAcked: message ID of Topic was acked; Batch when by
	// AckBatch. Message is nil.
	EventMessageAcked
	// EventMessageNacked: Message after its nack (State dead when its
	// attempts ran out, else its retry's DeliverAt), with the nack's Reason.
	EventMessageNacked
	// EventMessageCancelled: Message, as it was, was cancelled.
	EventMessageCancelled
	// EventMessageRescheduled: Message got a new due time.
	EventMessageRescheduled
	// EventMessageReplayed: Message was moved back from the dead letters.
	EventMessageReplayed
	// EventMessageDeleted: dead letter ID of Topic was deleted. Message is nil.
	EventMessageDeleted

	numEventKinds
)

// EventMask is a set of event kinds.
type EventMask uint32

// The counting events (EventSent to EventScheduleMissed) and the message
// events (EventMessageSent on).
const (
	CountingEvents EventMask = 1<<EventTopicSettingsChanged - 1<<EventSent
	MessageEvents  EventMask = 1<<numEventKinds - 1<<EventMessageSent
)

// Mask returns the set of kinds.
func Mask(kinds ...EventKind) EventMask {
	var m EventMask
	for _, k := range kinds {
		m |= 1 << k
	}
	return m
}

// Has reports whether k is in m.
func (m EventMask) Has(k EventKind) bool { return m&(1<<k) != 0 }

// Event is one thing the engine did. Which fields are set depends on Kind
// (see the kinds); the rest are zero. It is passed by value, so counting
// events cost no allocation.
type Event struct {
	Kind  EventKind
	Topic string
	// N counts the messages of a counting event.
	N int
	// Lateness of EventDelivered.
	Lateness time.Duration
	// Held of EventThrottled.
	Held time.Duration
	// Op of EventStoreError: "send", "lease", "promote", "expire", "rate",
	// "schedule".
	Op string
	// Schedule names the recurring schedule of EventScheduleFired and
	// EventScheduleMissed.
	Schedule string
	// Message of the message events (nil for acks and deletes).
	Message *domain.Message
	// ID of EventMessageAcked and EventMessageDeleted.
	ID string
	// Reason of EventMessageNacked.
	Reason string
	// Batch marks an EventMessageAcked made by AckBatch.
	Batch bool
}

// Subscription asks for the events of Kinds. Handle is called once per
// event, synchronously, on the goroutine of the call or background job
// that caused it, so from several goroutines at once; events of one call
// arrive in order (a nack's EventNacked, then EventDied, then
// EventMessageNacked). It must be fast, must not block, and must not call
// the engine.
type Subscription struct {
	Kinds  EventMask
	Handle func(Event)
}

// hub fans events out to the subscriptions. The list is copied on change
// and read with one atomic load, so emitting takes no lock, and emitting a
// kind nobody asked for is a load and a test.
type hub struct {
	mu   sync.Mutex // serializes changes
	next uint64     // id of the next subscription
	cur  atomic.Pointer[subList]
}

type subList struct {
	kinds EventMask // union of the subscriptions' kinds
	subs  []sub
}

type sub struct {
	id uint64
	Subscription
}

func (h *hub) subscribe(s Subscription) (cancel func()) {
	if s.Handle == nil || s.Kinds == 0 {
		return func() {}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	id := h.next
	h.replace(func(subs []sub) []sub { return append(subs, sub{id: id, Subscription: s}) })
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.replace(func(subs []sub) []sub {
				out := subs[:0]
				for _, x := range subs {
					if x.id != id {
						out = append(out, x)
					}
				}
				return out
			})
		})
	}
}

// replace installs edit's result on a copy of the list. h.mu held.
func (h *hub) replace(edit func([]sub) []sub) {
	var old []sub
	if l := h.cur.Load(); l != nil {
		old = l.subs
	}
	subs := edit(append([]sub(nil), old...))
	l := &subList{subs: subs}
	for _, s := range subs {
		l.kinds |= s.Kinds
	}
	h.cur.Store(l)
}

// wants reports whether a subscription asks for k: callers building
// message events check it first, so nobody pays for events nobody reads.
func (h *hub) wants(k EventKind) bool {
	l := h.cur.Load()
	return l != nil && l.kinds.Has(k)
}

func (h *hub) emit(ev Event) {
	l := h.cur.Load()
	if l == nil || !l.kinds.Has(ev.Kind) {
		return
	}
	for i := range l.subs {
		if l.subs[i].Kinds.Has(ev.Kind) {
			l.subs[i].Handle(ev)
		}
	}
}

func (h *hub) count(k EventKind, topic string, n int) {
	h.emit(Event{Kind: k, Topic: topic, N: n})
}

func (h *hub) storeError(op string) { h.emit(Event{Kind: EventStoreError, Op: op}) }

// Subscribe adds a subscription for the engine's events until cancel is
// called. Subscriptions that must see every event from the start go in
// Config.Subscriptions instead.
func (e *Engine) Subscribe(s Subscription) (cancel func()) { return e.events.subscribe(s) }
