package domain

import (
	"context"
	"time"
)

// Queue is the set of queue operations. The embedded engine, the Redis
// engine and the HTTP Client all implement it, so the Worker and the
// conformance tests run against any of them.
//
// Implementations are safe for concurrent use.
type Queue interface {
	// Send schedules one message. A known ID answers the existing message
	// with Duplicate set and creates nothing. A new message's answer
	// need not carry its Payload and Headers (the caller has them); where
	// it does, they are the request's own, not copies.
	Send(ctx context.Context, topic string, req SendRequest) (*Message, error)
	// SendBatch schedules up to MaxBatch messages; results are in order,
	// each either a message or an error. The returned error is for the
	// whole call (nothing was accepted).
	SendBatch(ctx context.Context, topic string, reqs []SendRequest) ([]SendResult, error)
	// Get returns a message with its State.
	Get(ctx context.Context, topic, id string) (*Message, error)
	// Cancel removes a scheduled, ready or inflight message and returns it
	// as it was (State tells the state it was in).
	Cancel(ctx context.Context, topic, id string) (*Message, error)
	// Reschedule moves a scheduled or ready message to a new due time;
	// inflight and dead messages give ErrConflict.
	Reschedule(ctx context.Context, topic, id string, when When) (*Message, error)

	// Lease hands out up to req.Max due messages, long-polling up to
	// req.Wait when none is ready.
	Lease(ctx context.Context, topic string, req LeaseRequest) ([]*Message, error)
	// Ack acknowledges a leased message; a stale receipt is ErrConflict.
	// Repeated with the receipt that acked it, it answers nil again.
	Ack(ctx context.Context, topic, id, receipt string) error
	// AckBatch acknowledges many; the slice holds one error (or nil) per item.
	AckBatch(ctx context.Context, topic string, acks []AckRequest) ([]error, error)
	// Nack reports a failed delivery: the message is rescheduled after
	// req.Delay (or the topic's backoff) or goes dead when its failures
	// reach MaxAttempts. Repeated with the same receipt and reason before
	// the message is leased again, it answers the message as the first
	// nack left it and counts no second failure; a stale receipt is
	// ErrConflict.
	Nack(ctx context.Context, topic, id, receipt string, req NackRequest) (*Message, error)
	// Extend pushes the lease of an inflight message to now+lease.
	Extend(ctx context.Context, topic, id, receipt string, lease time.Duration) (*Message, error)

	// Topics lists the known topics with counts.
	Topics(ctx context.Context) ([]TopicInfo, error)
	// Topic describes one topic.
	Topic(ctx context.Context, topic string) (*TopicInfo, error)
	// SetTopicSettings replaces a topic's settings and returns them with
	// defaults filled in.
	SetTopicSettings(ctx context.Context, topic string, s TopicSettings) (*TopicSettings, error)

	// DeadList pages through a topic's dead letters, oldest first.
	DeadList(ctx context.Context, topic string, req DeadListRequest) (*DeadPage, error)
	// DeadReplay moves one dead message back to ready with failures reset.
	DeadReplay(ctx context.Context, topic, id string) (*Message, error)
	// DeadReplayAll replays every dead message of the topic.
	DeadReplayAll(ctx context.Context, topic string) (int, error)
	// DeadDelete purges one dead message.
	DeadDelete(ctx context.Context, topic, id string) error
	// DeadPurge purges every dead message of the topic.
	DeadPurge(ctx context.Context, topic string) (int, error)
}

// When is a due time: either Delay from now (by the engine's clock) or an
// absolute DeliverAt. Both zero means "due now"; both set is invalid.
type When struct {
	Delay     time.Duration
	DeliverAt time.Time
}

// SendRequest is one message to schedule.
type SendRequest struct {
	// ID is optional; the engine makes a time-sortable one when empty.
	ID          string
	Payload     []byte
	Headers     map[string]string
	When        When
	MaxAttempts int // 0: the topic's setting
	// Priority orders the message among the topic's due ones: 0 (the
	// default, the most urgent) to MaxPriority, lower first. It never
	// makes a message due earlier.
	Priority int
}

// SendResult is one item of a batch answer.
type SendResult struct {
	Message *Message
	Err     error
}

// LeaseRequest asks for due messages.
type LeaseRequest struct {
	Max   int           // 1..MaxBatch; 0 means 1
	Lease time.Duration // 0: the topic's default lease
	Wait  time.Duration // long-poll up to this (≤ MaxWait) when nothing is ready
}

// AckRequest is one item of a batch ack.
type AckRequest struct {
	ID      string
	Receipt string
}

// NackRequest reports why a delivery failed.
type NackRequest struct {
	// Delay overrides the backoff when HasDelay is set (0 means "retry now").
	Delay    time.Duration
	HasDelay bool
	Reason   string
	// Dead moves the message to dead letters now, whatever attempts it has
	// left: the failure is permanent (bad input, a deleted account) and a
	// retry cannot succeed. Delay must not be set with it.
	Dead bool
}

// DeadListRequest pages through dead letters.
type DeadListRequest struct {
	Limit  int
	Cursor string
}

// DeadPage is one page of dead letters; Next is empty on the last page.
type DeadPage struct {
	Messages []*Message
	Next     string
}

// Limits shared by every implementation.
const (
	MaxBatch       = 1000
	MaxNameLen     = 200
	MaxHeaders     = 64
	MaxHeaderBytes = 8 << 10 // keys + values of one message
	MaxWait        = 30 * time.Second
	// DefaultMaxPayload is the default payload limit (configurable per server).
	DefaultMaxPayload = 1 << 20
)

// SendOption sets a field of a SendRequest; see Client.Send.
type SendOption func(*SendRequest)

// After makes the message due d from now.
func After(d time.Duration) SendOption { return func(r *SendRequest) { r.When = When{Delay: d} } }

// At makes the message due at t.
func At(t time.Time) SendOption { return func(r *SendRequest) { r.When = When{DeliverAt: t} } }

// WithID sets the message id, which makes the send idempotent.
func WithID(id string) SendOption { return func(r *SendRequest) { r.ID = id } }

// WithHeaders attaches small string headers.
func WithHeaders(h map[string]string) SendOption { return func(r *SendRequest) { r.Headers = h } }

// WithMaxAttempts overrides the topic's max attempts for this message.
func WithMaxAttempts(n int) SendOption { return func(r *SendRequest) { r.MaxAttempts = n } }

// WithPriority sets the message's priority within its topic: 0 (the
// default, the most urgent) to MaxPriority; among due messages, lower is
// leased first. It never makes a message due earlier.
func WithPriority(n int) SendOption { return func(r *SendRequest) { r.Priority = n } }

// NewSendRequest builds a SendRequest from a payload and options.
func NewSendRequest(payload []byte, opts ...SendOption) SendRequest {
	r := SendRequest{Payload: payload}
	for _, o := range opts {
		o(&r)
	}
	return r
}
