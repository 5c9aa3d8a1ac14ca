package delayq

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/pushsig"
)

// The domain types live in internal/domain, a leaf package that the
// engine, the stores, the HTTP API and push delivery share without
// importing this package; they are the same types under the names below.

// Queue is the set of queue operations. The embedded engine, the Redis and
// SQL engines and the HTTP Client all implement it, so the Worker and the
// conformance tests run against any of them. Implementations are safe for
// concurrent use.
type Queue = domain.Queue

// AckLeaser is implemented by a Queue that can ack and lease in one call
// (Client.AckAndLease): a Worker on such a queue sends the acks waiting
// for their batch with its next lease instead of a call of their own, and
// sends them apart from the first error wrapping
// ErrAcksWithLeaseUnsupported on.
type AckLeaser interface {
	AckAndLease(ctx context.Context, topic string, acks []AckRequest, req LeaseRequest) ([]*Message, []error, error)
}

// Scheduler manages recurring schedules: named cron expressions that send
// one message per tick (docs/features.md, "Recurring schedules").
type Scheduler = domain.Scheduler

// TopicAdmin browses a topic's messages, changes them in bulk and pauses
// topics (docs/features.md, "Browse, bulk changes, pause").
type TopicAdmin = domain.TopicAdmin

type (
	// MessageFilter selects a topic's messages in one state.
	MessageFilter = domain.MessageFilter
	// ListRequest asks for one page of ListMessages.
	ListRequest = domain.ListRequest
	// MessagePage is one page of messages; Next is empty on the last page.
	MessagePage = domain.MessagePage
)

type (
	// Message is one delayed message as seen by producers, consumers and operators.
	Message = domain.Message
	// State is where a message is in its lifecycle (docs/state-machine.md).
	State = domain.State
	// When is a due time: a Delay from now or an absolute DeliverAt.
	When = domain.When
	// SendRequest is one message to schedule.
	SendRequest = domain.SendRequest
	// SendResult is one item of a batch answer.
	SendResult = domain.SendResult
	// SendOption sets a field of a SendRequest; see Client.Send.
	SendOption = domain.SendOption
	// LeaseRequest asks for due messages.
	LeaseRequest = domain.LeaseRequest
	// AckRequest is one item of a batch ack.
	AckRequest = domain.AckRequest
	// NackRequest reports why a delivery failed.
	NackRequest = domain.NackRequest
	// DeadListRequest pages through dead letters.
	DeadListRequest = domain.DeadListRequest
	// DeadPage is one page of dead letters; Next is empty on the last page.
	DeadPage = domain.DeadPage
	// TopicSettings are a topic's retry, lease, rate-limit and push settings.
	TopicSettings = domain.TopicSettings
	// TopicInfo is a topic with its counts and settings.
	TopicInfo = domain.TopicInfo
	// TopicCounts counts a topic's messages by state.
	TopicCounts = domain.TopicCounts
	// Backoff is a retry policy.
	Backoff = domain.Backoff
	// RateLimit caps a topic's deliveries per second.
	RateLimit = domain.RateLimit
	// PushSettings make the server deliver a topic's due messages to a URL.
	PushSettings = domain.PushSettings
	// DeliverSettings make the server publish a topic's due messages into
	// a broker (Kafka, RabbitMQ, NATS JetStream, Redis Streams).
	DeliverSettings = domain.DeliverSettings
	// KafkaTarget is a Kafka topic to deliver into.
	KafkaTarget = domain.KafkaTarget
	// KafkaSASL authenticates to Kafka.
	KafkaSASL = domain.KafkaSASL
	// RabbitMQTarget is a RabbitMQ exchange to deliver into.
	RabbitMQTarget = domain.RabbitMQTarget
	// NATSTarget is a NATS JetStream subject to deliver into.
	NATSTarget = domain.NATSTarget
	// RedisTarget is a Redis stream to deliver into.
	RedisTarget = domain.RedisTarget
	// TLSSettings configure TLS to a broker.
	TLSSettings = domain.TLSSettings
	// Schedule is a recurring message.
	Schedule = domain.Schedule
	// MissedPolicy says what a schedule does with ticks missed while no server ran.
	MissedPolicy = domain.MissedPolicy
	// InvalidError names the field that is wrong. It matches ErrInvalid.
	InvalidError = domain.InvalidError
)

// Message states.
const (
	StateScheduled = domain.StateScheduled
	StateReady     = domain.StateReady
	StateInflight  = domain.StateInflight
	StateAcked     = domain.StateAcked
	StateDead      = domain.StateDead
	StateCancelled = domain.StateCancelled
)

// Schedule policies and limits.
const (
	MissedFireOnce     = domain.MissedFireOnce
	MissedSkip         = domain.MissedSkip
	ScheduleGrace      = domain.ScheduleGrace
	MaxScheduleNameLen = domain.MaxScheduleNameLen
)

// Limits shared by every implementation.
const (
	MaxBatch          = domain.MaxBatch
	MaxNameLen        = domain.MaxNameLen
	MaxHeaders        = domain.MaxHeaders
	MaxHeaderBytes    = domain.MaxHeaderBytes
	MaxWait           = domain.MaxWait
	DefaultMaxPayload = domain.DefaultMaxPayload
	MaxPriority       = domain.MaxPriority // the least urgent message priority (0 is the most)
)

// Sentinel errors shared by every Queue implementation (engines and the
// HTTP client), so callers test them with errors.Is whatever the transport.
var (
	ErrNotFound     = domain.ErrNotFound
	ErrConflict     = domain.ErrConflict
	ErrInvalid      = domain.ErrInvalid
	ErrTooLarge     = domain.ErrTooLarge
	ErrUnavailable  = domain.ErrUnavailable
	ErrRateLimited  = domain.ErrRateLimited
	ErrUnauthorized = domain.ErrUnauthorized
	ErrForbidden    = domain.ErrForbidden
)

// Invalid returns an *InvalidError for field.
func Invalid(field, format string, args ...any) error {
	return domain.Invalid(field, format, args...)
}

// NewID returns a new message id: 26 characters of Crockford base32, a
// 48-bit Unix millisecond time then 80 bits that are random at each new
// millisecond and incremented within one (ULID layout), so the ids of one
// process sort by creation. The Client uses it to make sends safe to retry.
func NewID() string { return domain.NewID() }

// After makes the message due d from now.
func After(d time.Duration) SendOption { return domain.After(d) }

// At makes the message due at t.
func At(t time.Time) SendOption { return domain.At(t) }

// WithID sets the message id, which makes the send idempotent.
func WithID(id string) SendOption { return domain.WithID(id) }

// WithHeaders attaches small string headers.
func WithHeaders(h map[string]string) SendOption { return domain.WithHeaders(h) }

// WithMaxAttempts overrides the topic's max attempts for this message.
func WithMaxAttempts(n int) SendOption { return domain.WithMaxAttempts(n) }

// WithPriority sets the message's priority within its topic, 0 to
// MaxPriority: among the topic's due messages, lower is leased first, and
// 0 (the default) is the most urgent. Priority never makes a message due
// earlier. Weights across topics are WorkerConfig.SharedConcurrency and
// HandlerWeight.
func WithPriority(n int) SendOption { return domain.WithPriority(n) }

// NewSendRequest builds a SendRequest from a payload and options.
func NewSendRequest(payload []byte, opts ...SendOption) SendRequest {
	return domain.NewSendRequest(payload, opts...)
}

// ValidateTopic checks a topic name: 1–200 chars of [A-Za-z0-9._:-].
func ValidateTopic(topic string) error { return domain.ValidateTopic(topic) }

// ValidateID checks a message id: 1–200 chars of [A-Za-z0-9._:@+=-].
func ValidateID(id string) error { return domain.ValidateID(id) }

// ValidateHeaders checks message headers (count, size, keys without
// control characters or line separators).
func ValidateHeaders(h map[string]string) error { return domain.ValidateHeaders(h) }

// ValidateScheduleName checks a schedule name: 1–150 chars of [A-Za-z0-9._:-].
func ValidateScheduleName(name string) error { return domain.ValidateScheduleName(name) }

// ScheduleMessageID is the id of the message a schedule sends for a tick.
func ScheduleMessageID(name string, tick time.Time) string {
	return domain.ScheduleMessageID(name, tick)
}

// Push delivery headers (docs/features.md, "Push delivery").
const (
	PushHeaderSignature = pushsig.HeaderSignature
	PushHeaderMessageID = pushsig.HeaderMessageID
	PushHeaderAttempt   = pushsig.HeaderAttempt
	PushHeaderTopic     = pushsig.HeaderTopic
	PushHeaderPriority  = pushsig.HeaderPriority
)

// ErrBadSignature is returned by VerifyPushSignature.
var ErrBadSignature = pushsig.ErrBadSignature

// SignPush returns the Delayq-Signature header value for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<unix seconds>." + body)>".
func SignPush(secret string, t time.Time, body []byte) string {
	return pushsig.Sign(secret, t, body)
}

// VerifyPushSignature checks a Delayq-Signature header against the raw
// request body, for receivers of push delivery: the MAC must match (in
// constant time) one v1 value, and the timestamp must be within tolerance
// of now (either way), which bounds replays. A tolerance of 0 means 5
// minutes. It returns nil or an error matching ErrBadSignature.
func VerifyPushSignature(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	return pushsig.Verify(secret, header, body, now, tolerance)
}
