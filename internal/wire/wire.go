// Package wire is the whole JSON representation of HTTP API v1, shared by
// the server (internal/httpapi), the Go client (package delayq), the CLI's
// --json output and push deliveries: the JSON shapes and error codes
// (wire.go), the strict request decoder (decode_strict.go) with its fast
// paths (json_scan.go, json_split.go, decode_send.go), the hand-written
// encoders and answer decoder of the batch send (append.go, parse.go). It
// imports only the standard library and internal/domain.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a JSON duration written as a Go duration string ("1500ms",
// "30s", "2h30m"). A bare number is rejected on purpose: `"delay": 30`
// would be ambiguous (seconds? ms?), and a wrong guess delivers early.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts only a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		return fmt.Errorf("want a duration string such as \"30s\" or \"1500ms\", got %s", truncate(b))
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"30s\" or \"1500ms\"", s)
	}
	*d = Duration(v)
	return nil
}

func truncate(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "…"
	}
	return string(bytes.TrimSpace(b))
}

// SendRequest is the body of POST /v1/topics/{topic}/messages and one item
// of a batch. Exactly one of Payload, PayloadBase64 and PayloadJSON; at
// most one of Delay, DelayMS and DeliverAt (none: due now).
type SendRequest struct {
	// ID is nil when absent (the server makes one); an explicit "" is an
	// error, so that an unset variable in the caller cannot silently turn
	// off idempotency.
	ID            *string `json:"id,omitempty"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 *string `json:"payload_base64,omitempty"`
	// PayloadJSON is the payload as a JSON value ({"order":42}): stored as
	// its compact text, marked with the HeaderPayloadFormat header, and
	// answered as payload_json again.
	PayloadJSON json.RawMessage   `json:"payload_json,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Delay       *Duration         `json:"delay,omitempty"`
	DelayMS     *int64            `json:"delay_ms,omitempty"`
	DeliverAt   *time.Time        `json:"deliver_at,omitempty"`
	MaxAttempts *int              `json:"max_attempts,omitempty"`
	// Priority: 0 (absent, the most urgent) to 255; lower first among
	// the topic's due messages.
	Priority *int `json:"priority,omitempty"`

	// fastPayload is the payload as the server's fast decoder read it
	// (decodeFastPayload), "payload" or "payload_base64" (as
	// fastPayloadBase64 says) decoded straight from the body, with
	// Payload and PayloadBase64 left nil; nil otherwise.
	fastPayload       []byte
	fastPayloadBase64 bool
}

// SendBatchRequest is the body of POST /v1/topics/{topic}/messages:batch.
type SendBatchRequest struct {
	Messages []json.RawMessage `json:"messages"`
}

// BatchResult is one item of a batch answer: a message or an error.
type BatchResult struct {
	Message *Message   `json:"message,omitempty"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// SendBatchResponse answers a batch send, in request order.
type SendBatchResponse struct {
	Results []BatchResult `json:"results"`
}

// RescheduleRequest is the body of PATCH /v1/topics/{topic}/messages/{id}.
type RescheduleRequest struct {
	Delay     *Duration  `json:"delay,omitempty"`
	DelayMS   *int64     `json:"delay_ms,omitempty"`
	DeliverAt *time.Time `json:"deliver_at,omitempty"`
}

// Message is a message as answered by the API. The payload comes as
// PayloadJSON when it was sent so, else as Payload when it is valid
// UTF-8, else as PayloadBase64.
type Message struct {
	ID             string            `json:"id"`
	Topic          string            `json:"topic"`
	Payload        *string           `json:"payload,omitempty"`
	PayloadBase64  *string           `json:"payload_base64,omitempty"`
	PayloadJSON    json.RawMessage   `json:"payload_json,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	DeliverAt      time.Time         `json:"deliver_at"`
	State          string            `json:"state"`
	Attempt        int               `json:"attempt"`
	Failures       int               `json:"failures"`
	MaxAttempts    int               `json:"max_attempts"`
	Priority       int               `json:"priority"`
	LastError      string            `json:"last_error,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	Receipt        string            `json:"receipt,omitempty"`
	LeaseExpiresAt *time.Time        `json:"lease_expires_at,omitempty"`
	Duplicate      bool              `json:"duplicate,omitempty"`
}

// LeaseRequest is the body of POST /v1/topics/{topic}/lease.
type LeaseRequest struct {
	Max   *int      `json:"max,omitempty"`
	Lease *Duration `json:"lease,omitempty"`
	Wait  *Duration `json:"wait,omitempty"`
	// Acks are acknowledged before the lease, as by a batch ack.
	Acks []AckItem `json:"acks,omitempty"`
}

// MessagesResponse carries a list of messages (lease answers), and the
// outcome of the lease's acks, in request order, when it had some.
type MessagesResponse struct {
	Messages []*Message  `json:"messages"`
	Acks     []AckResult `json:"acks,omitempty"`
}

// AckRequest is the body of POST …/messages/{id}/ack.
type AckRequest struct {
	Receipt string `json:"receipt"`
}

// AckItem is one item of a batch ack.
type AckItem struct {
	ID      string `json:"id"`
	Receipt string `json:"receipt"`
}

// AckBatchRequest is the body of POST /v1/topics/{topic}/acks.
type AckBatchRequest struct {
	Acks []AckItem `json:"acks"`
}

// AckResult is one item of a batch ack answer.
type AckResult struct {
	ID    string     `json:"id"`
	OK    bool       `json:"ok"`
	Error *ErrorBody `json:"error,omitempty"`
}

// AckBatchResponse answers a batch ack, in request order.
type AckBatchResponse struct {
	Results []AckResult `json:"results"`
}

// NackRequest is the body of POST …/messages/{id}/nack.
type NackRequest struct {
	Receipt string    `json:"receipt"`
	Delay   *Duration `json:"delay,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Dead    bool      `json:"dead,omitempty"`
}

// ExtendRequest is the body of POST …/messages/{id}/extend.
type ExtendRequest struct {
	Receipt string    `json:"receipt"`
	Lease   *Duration `json:"lease"`
}

// Backoff mirrors delayq.Backoff. Answers carry each duration twice: as a
// string and as whole milliseconds (*_ms), so that clients in other
// languages need not parse Go duration strings. Requests may give either
// (see TopicSettings.ResolveMS).
//
// Initial and Jitter are pointers because zero is a setting of its own
// there (retry at once, no spread), apart from absent (the default).
type Backoff struct {
	Initial    *Duration `json:"initial,omitempty"`
	InitialMS  *int64    `json:"initial_ms,omitempty"`
	Max        Duration  `json:"max"`
	MaxMS      *int64    `json:"max_ms,omitempty"`
	Multiplier float64   `json:"multiplier"`
	Jitter     *float64  `json:"jitter,omitempty"`
}

// RateLimit mirrors delayq.RateLimit.
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// Push mirrors delayq.PushSettings. Secret is write-only: answers carry
// SecretSet instead.
type Push struct {
	URL         string   `json:"url"`
	Timeout     Duration `json:"timeout,omitempty"`
	TimeoutMS   *int64   `json:"timeout_ms,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Secret      string   `json:"secret,omitempty"`
	SecretSet   bool     `json:"secret_set,omitempty"`
}

// PushBody is the JSON body of a push delivery (POST to a topic's push
// URL). The payload comes as Payload when it is valid UTF-8, else as
// PayloadBase64. The message id, attempt, topic and priority are also in
// the Delayq-Message-Id, Delayq-Attempt, Delayq-Topic and Delayq-Priority
// headers.
type PushBody struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	PayloadJSON   json.RawMessage   `json:"payload_json,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Attempt       int               `json:"attempt"`
	MaxAttempts   int               `json:"max_attempts"`
	Priority      int               `json:"priority"`
	DeliverAt     time.Time         `json:"deliver_at"`
	CreatedAt     time.Time         `json:"created_at"`
}

// TopicSettings is the body of PUT /v1/topics/{topic} and part of topic
// answers. The *_ms fields are the durations in whole milliseconds:
// answers carry both forms, requests either (ResolveMS), so that a topic
// read, changed and written back keeps working whichever form was changed.
type TopicSettings struct {
	MaxAttempts int        `json:"max_attempts,omitempty"`
	Backoff     *Backoff   `json:"backoff,omitempty"`
	Lease       *Duration  `json:"lease,omitempty"`
	LeaseMS     *int64     `json:"lease_ms,omitempty"`
	RateLimit   *RateLimit `json:"rate_limit,omitempty"`
	Push        *Push      `json:"push,omitempty"`
	Deliver     *Deliver   `json:"deliver,omitempty"`
	// Warning, in a PUT's answer, says what the PUT removed that the
	// caller may not have meant to (a push target). Answer-only: ignored
	// on input, so an answer can be sent back as it is.
	Warning string `json:"warning,omitempty"`
}

// Deliver mirrors delayq.DeliverSettings: exactly one of the targets.
// Credentials are write-only: answers clear them and say *_set instead
// (a URL's password shows as "xxxxx"); a request that leaves them out
// keeps the stored ones.
type Deliver struct {
	Kafka       *DeliverKafka    `json:"kafka,omitempty"`
	RabbitMQ    *DeliverRabbitMQ `json:"rabbitmq,omitempty"`
	NATS        *DeliverNATS     `json:"nats,omitempty"`
	Redis       *DeliverRedis    `json:"redis,omitempty"`
	MaxInFlight int              `json:"max_in_flight,omitempty"`
	TimeoutMS   int64            `json:"timeout_ms,omitempty"`
}

// DeliverTLS mirrors delayq.TLSSettings.
type DeliverTLS struct {
	CAPEM              string `json:"ca_pem,omitempty"`
	ServerName         string `json:"server_name,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty"`
}

// DeliverKafka mirrors delayq.KafkaTarget.
type DeliverKafka struct {
	Brokers   []string     `json:"brokers"`
	Topic     string       `json:"topic"`
	KeyHeader string       `json:"key_header,omitempty"`
	SASL      *DeliverSASL `json:"sasl,omitempty"`
	TLS       *DeliverTLS  `json:"tls,omitempty"`
}

// DeliverSASL mirrors delayq.KafkaSASL.
type DeliverSASL struct {
	Mechanism   string `json:"mechanism"`
	User        string `json:"user"`
	Password    string `json:"password,omitempty"`
	PasswordSet bool   `json:"password_set,omitempty"`
}

// DeliverRabbitMQ mirrors delayq.RabbitMQTarget.
type DeliverRabbitMQ struct {
	URL        string      `json:"url"`
	Exchange   string      `json:"exchange,omitempty"`
	RoutingKey string      `json:"routing_key,omitempty"`
	TLS        *DeliverTLS `json:"tls,omitempty"`
}

// DeliverNATS mirrors delayq.NATSTarget.
type DeliverNATS struct {
	URL         string      `json:"url"`
	Subject     string      `json:"subject"`
	User        string      `json:"user,omitempty"`
	Password    string      `json:"password,omitempty"`
	PasswordSet bool        `json:"password_set,omitempty"`
	Token       string      `json:"token,omitempty"`
	TokenSet    bool        `json:"token_set,omitempty"`
	TLS         *DeliverTLS `json:"tls,omitempty"`
}

// DeliverRedis mirrors delayq.RedisTarget.
type DeliverRedis struct {
	Addr        string      `json:"addr"`
	Stream      string      `json:"stream"`
	MaxLen      int64       `json:"maxlen,omitempty"`
	Username    string      `json:"username,omitempty"`
	Password    string      `json:"password,omitempty"`
	PasswordSet bool        `json:"password_set,omitempty"`
	DB          int         `json:"db,omitempty"`
	TLS         *DeliverTLS `json:"tls,omitempty"`
}

// Schedule answers the schedule endpoints. The payload comes as Payload
// when it is valid UTF-8, else as PayloadBase64.
type Schedule struct {
	Name          string            `json:"name,omitempty"`
	Topic         string            `json:"topic"`
	Cron          string            `json:"cron"`
	Timezone      string            `json:"timezone,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	PayloadJSON   json.RawMessage   `json:"payload_json,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	Priority      int               `json:"priority,omitempty"`
	Delay         *Duration         `json:"delay,omitempty"`
	DelayMS       *int64            `json:"delay_ms,omitempty"` // Delay in whole milliseconds
	Paused        bool              `json:"paused"`
	Missed        string            `json:"missed,omitempty"`
	LastTick      *time.Time        `json:"last_tick,omitempty"`
	NextTick      *time.Time        `json:"next_tick,omitempty"`
	CreatedAt     *time.Time        `json:"created_at,omitempty"`
	UpdatedAt     *time.Time        `json:"updated_at,omitempty"`
}

// ScheduleRequest is the body of PUT /v1/schedules/{name}: the whole
// schedule (omitted optional fields take their defaults). At most one of
// Payload, PayloadBase64 and PayloadJSON (as in a send).
type ScheduleRequest struct {
	Topic         string            `json:"topic"`
	Cron          string            `json:"cron"`
	Timezone      string            `json:"timezone,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	PayloadJSON   json.RawMessage   `json:"payload_json,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	MaxAttempts   *int              `json:"max_attempts,omitempty"`
	Priority      *int              `json:"priority,omitempty"`
	Delay         *Duration         `json:"delay,omitempty"`
	Paused        *bool             `json:"paused,omitempty"`
	Missed        string            `json:"missed,omitempty"`
}

// SchedulePatch is the body of PATCH /v1/schedules/{name}: pause or resume.
type SchedulePatch struct {
	Paused *bool `json:"paused"`
}

// SchedulesResponse answers GET /v1/schedules.
type SchedulesResponse struct {
	Schedules []Schedule `json:"schedules"`
}

// Counts are messages per state.
type Counts struct {
	Scheduled int64 `json:"scheduled"`
	Ready     int64 `json:"ready"`
	Inflight  int64 `json:"inflight"`
	Dead      int64 `json:"dead"`
}

// Topic answers GET /v1/topics/{topic}.
type Topic struct {
	Name             string        `json:"name"`
	Counts           Counts        `json:"counts"`
	NextDue          *time.Time    `json:"next_due,omitempty"`
	OldestReadyAgeMS *int64        `json:"oldest_ready_age_ms,omitempty"`
	Settings         TopicSettings `json:"settings"`
	// Paused: no leases (nor push deliveries) until resumed.
	Paused bool `json:"paused"`
}

// TopicsResponse answers GET /v1/topics.
type TopicsResponse struct {
	Topics []Topic `json:"topics"`
}

// DeadPage answers GET /v1/topics/{topic}/dead.
type DeadPage struct {
	Messages []*Message `json:"messages"`
	Next     string     `json:"next_cursor,omitempty"`
}

// MessageFilter selects messages of a topic for a bulk operation.
type MessageFilter struct {
	State     string     `json:"state,omitempty"`
	DueAfter  *time.Time `json:"due_after,omitempty"`
	DueBefore *time.Time `json:"due_before,omitempty"`
}

// BulkRequest is the body of POST …/messages:cancel (filter only) and
// …/messages:reschedule (filter and one of the due-time fields).
type BulkRequest struct {
	Filter    *MessageFilter `json:"filter"`
	Delay     *Duration      `json:"delay,omitempty"`
	DelayMS   *int64         `json:"delay_ms,omitempty"`
	DeliverAt *time.Time     `json:"deliver_at,omitempty"`
}

// When is the request's due-time fields as a RescheduleRequest.
func (in *BulkRequest) When() *RescheduleRequest {
	return &RescheduleRequest{Delay: in.Delay, DelayMS: in.DelayMS, DeliverAt: in.DeliverAt}
}

// MessagePage answers GET /v1/topics/{topic}/messages.
type MessagePage struct {
	Messages []*Message `json:"messages"`
	Next     string     `json:"next_cursor,omitempty"`
}

// CountResponse answers bulk operations (replay all, purge).
type CountResponse struct {
	Count int `json:"count"`
}

// CancelResponse answers DELETE …/messages/{id}: the message as it was.
type CancelResponse struct {
	Cancelled  bool     `json:"cancelled"`
	PriorState string   `json:"prior_state"`
	Message    *Message `json:"message"`
}

// StatusResponse answers GET /readyz.
type StatusResponse struct {
	Status string `json:"status"`
}

// HealthResponse answers GET /healthz: the status and which build is
// running (the same version and revision as `delayq version` and the
// delayq_build_info metric).
type HealthResponse struct {
	Status   string `json:"status"`
	Version  string `json:"version,omitempty"`
	Revision string `json:"revision,omitempty"`
}

// HeaderRequestID carries a request's id: the server answers every request
// with it (the caller's own, when well-formed, else one it made), and puts
// it in its log lines about the request and in error answers.
const HeaderRequestID = "X-Request-Id"

// ErrorBody is the error shape: {"error":{"code":"…","message":"…"}}.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// RequestID is the request's X-Request-Id, for finding the server's
	// log lines about it (absent on the items of a batch answer).
	RequestID string `json:"request_id,omitempty"`
}

// ErrorResponse wraps ErrorBody.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// Error codes, one per HTTP status family the API uses.
const (
	CodeInvalid         = "invalid_argument"       // 400
	CodeUnauthenticated = "unauthenticated"        // 401
	CodeForbidden       = "permission_denied"      // 403
	CodeNotFound        = "not_found"              // 404
	CodeMethod          = "method_not_allowed"     // 405
	CodeTimeout         = "request_timeout"        // 408: the body did not arrive within the read timeout
	CodeConflict        = "conflict"               // 409
	CodeTooLarge        = "payload_too_large"      // 413
	CodeMediaType       = "unsupported_media_type" // 415: a body that is not application/json
	CodeHeaderTooLarge  = "headers_too_large"      // 431
	CodeRateLimited     = "rate_limited"           // 429
	CodeUnavailable     = "unavailable"            // 503
	CodeNotImplemented  = "not_implemented"        // 501: endpoint reserved, not built yet
	CodeInternal        = "internal"               // 500: a bug, never bad input
)
