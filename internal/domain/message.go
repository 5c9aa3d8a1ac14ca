package domain

import "time"

// State is where a message is in its lifecycle (see docs/state-machine.md).
type State string

// Message states.
const (
	// StateScheduled: accepted, not yet due.
	StateScheduled State = "scheduled"
	// StateReady: due, waiting for a consumer.
	StateReady State = "ready"
	// StateInflight: leased to a consumer until LeaseExpiresAt.
	StateInflight State = "inflight"
	// StateAcked: acknowledged; only metadata is kept, for the dedup window.
	StateAcked State = "acked"
	// StateDead: failures reached MaxAttempts; kept in the topic's dead-letter list.
	StateDead State = "dead"
	// StateCancelled is reported by Cancel for the message it removed.
	StateCancelled State = "cancelled"
)

// Message is one delayed message as seen by producers, consumers and operators.
type Message struct {
	Topic   string
	ID      string
	Payload []byte
	Headers map[string]string

	// DeliverAt is when the message is (or was) due, with millisecond precision.
	DeliverAt time.Time
	State     State
	// Attempt counts deliveries (leases) so far.
	Attempt int
	// Failures counts nacks, handler errors and lease expiries; the message
	// goes dead when Failures reaches MaxAttempts.
	Failures    int
	MaxAttempts int
	LastError   string
	// Priority orders the message among the topic's due ones (lower
	// first; 0, the default, is the most urgent).
	Priority int

	CreatedAt time.Time
	UpdatedAt time.Time

	// Receipt and LeaseExpiresAt are set on messages handed out by Lease.
	// Ack, Nack and Extend must quote the receipt; a stale one is a conflict.
	Receipt        string
	LeaseExpiresAt time.Time

	// Duplicate is true when Send found an existing message with this id.
	Duplicate bool
}

// Backoff is a retry policy: the n-th failure (n ≥ 1) waits
// min(Initial·Multiplier^(n-1), Max), spread by ±Jitter (a fraction in [0,1]).
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
	// InitialSet and JitterSet mark a zero Initial (retry at once) or
	// Jitter (no spread) as meant; without them zero means the server's
	// default, as for the other fields.
	InitialSet, JitterSet bool
}

// PushSettings makes the server POST due messages of a topic to a URL
// (see docs/features.md, "Push delivery"): a 2xx answer acks the message,
// anything else (or a timeout) nacks it with the topic's backoff.
type PushSettings struct {
	// URL is an absolute http:// or https:// URL without user info. Push
	// URLs are set by admins; the server POSTs wherever they point.
	URL string
	// Timeout bounds one push (default 10 s, at most 5 min).
	Timeout time.Duration
	// Concurrency is the number of pushes in flight per server (default 4).
	Concurrency int
	// Secret signs each push (HMAC-SHA256, header Delayq-Signature; see
	// VerifyPushSignature). It is write-only: the HTTP API never answers
	// it (only SecretSet), and a SetTopicSettings whose Push has no Secret
	// keeps the stored one; remove Push to drop it.
	Secret string
	// SecretSet reports, in answers of the HTTP API, that a secret is
	// stored. It is ignored on input.
	SecretSet bool
}

// RateLimit caps how fast a topic's messages are released by Lease (and
// so by push delivery): PerSecond on average, up to Burst at once. Over
// the limit, due messages stay ready; they are never dropped.
type RateLimit struct {
	PerSecond float64
	// Burst is the bucket size; 0 means max(1, ceil(PerSecond)).
	Burst int
}

// TopicSettings are per-topic knobs. Zero fields mean "server default".
type TopicSettings struct {
	MaxAttempts int
	Backoff     Backoff
	Lease       time.Duration
	RateLimit   *RateLimit
	Push        *PushSettings
	// Deliver publishes the topic's due messages into a broker; it
	// excludes Push.
	Deliver *DeliverSettings
}

// TopicCounts are messages per state, kept incrementally (reading them never scans).
type TopicCounts struct {
	Scheduled int64
	Ready     int64
	Inflight  int64
	Dead      int64
}

// TopicInfo describes a topic for stats and dashboards.
type TopicInfo struct {
	Name     string
	Counts   TopicCounts
	Settings TopicSettings
	// Paused: no leases (and so no push or broker delivery) until
	// resumed; sends are still accepted.
	Paused bool
	// NextDue is the due time of the earliest scheduled message (zero if none).
	NextDue time.Time
	// OldestReady is the due time of the oldest ready message (zero if none);
	// its age is the consumer lag.
	OldestReady time.Time
}
