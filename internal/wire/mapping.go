package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/domain"
)

// The one mapping between the domain's types and their JSON shapes, for
// both directions and every user: the server (answers out, requests in),
// the Go client (requests out, answers in), the CLI's --json output and
// push deliveries.
//
// Requests are mapped as far as their shape goes (which fields are given,
// base64, what JSON cannot say otherwise, such as an explicit "id": "");
// the limits (payload size, delay bounds, header and id rules) are the
// engine's to check, and NameFields words its errors in the request's
// terms.

// --- Payloads: text as "payload" when valid UTF-8, else "payload_base64".

// EncodePayload returns p as the payload fields: text when p is valid
// UTF-8 (readable in logs and the dashboard), else base64.
func EncodePayload(p []byte) (text, b64 *string) {
	if utf8.Valid(p) {
		s := string(p)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(p)
	return nil, &s
}

// strictBase64 is made once: Strict copies the encoding (its 256-byte
// decode table) on every call.
var strictBase64 = base64.StdEncoding.Strict()

// DecodePayload reads the payload fields of a request: exactly one of
// them, and base64 standard and padded.
func DecodePayload(text, b64 *string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, domain.Invalid("payload", "give either payload or payload_base64, not both")
	case text != nil:
		return []byte(*text), nil
	case b64 != nil:
		b, err := strictBase64.DecodeString(*b64)
		if err != nil {
			return nil, domain.Invalid("payload_base64", "is not standard padded base64: %v", err)
		}
		return b, nil
	}
	return nil, domain.Invalid("payload", "is required (use \"payload\": \"\" for an empty one, or payload_base64)")
}

// answerPayload reads the payload fields of an answer. A server never
// sends bad base64; if one did, an empty payload would hide it, so the raw
// text is kept instead.
func answerPayload(text, b64 *string) []byte {
	switch {
	case text != nil:
		return []byte(*text)
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return []byte(*b64)
		}
		return b
	}
	return nil
}

// --- Times.

// answerTime is t as answers carry it: UTC, to the millisecond (the API's
// precision); the zero time stays zero.
func answerTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	a := answerTime(t)
	return &a
}

func fromOptTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func optDuration(d time.Duration) *Duration {
	if d == 0 {
		return nil
	}
	w := Duration(d)
	return &w
}

// ceilMillis rounds t up to the millisecond, so that the API's precision
// can never make a message early.
func ceilMillis(t time.Time) time.Time {
	r := t.Truncate(time.Millisecond)
	if r.Before(t) {
		r = r.Add(time.Millisecond)
	}
	return r
}

// --- Messages.

// FromMessage is m as answers and the CLI's --json carry it: times in UTC
// to the millisecond, the payload as text or base64.
func FromMessage(m *domain.Message) *Message {
	out := fromMessageNoPayload(m)
	if m.Headers[HeaderPayloadFormat] == PayloadFormatJSON && json.Valid(m.Payload) {
		// Sent as payload_json: answered so, the marker header left out.
		out.PayloadJSON = m.Payload
		return out
	}
	out.Payload, out.PayloadBase64 = EncodePayload(m.Payload)
	return out
}

// HeaderPayloadFormat marks, with the value PayloadFormatJSON, a message
// whose payload was sent as payload_json. A header rather than a stored
// field: every engine keeps headers already, and messages stored before
// (without it) are answered as before. Answers leave it out and carry
// payload_json instead; Go programs see it in Message.Headers.
const (
	HeaderPayloadFormat = "delayq-payload-format"
	PayloadFormatJSON   = "json"
)

func withoutHeader(h map[string]string, key string) map[string]string {
	if len(h) == 1 {
		return nil
	}
	out := make(map[string]string, len(h)-1)
	for k, v := range h {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// FromSentMessage answers a send: the message without its payload, which
// the producer has just sent (echoing it doubled the bytes of every batch
// answer). A duplicate keeps it: the stored payload may differ from the
// one in the request.
func FromSentMessage(m *domain.Message) *Message {
	if m.Duplicate {
		return FromMessage(m)
	}
	return fromMessageNoPayload(m) // not encoded only to be dropped
}

// FromMessages is FromMessage of each.
func FromMessages(ms []*domain.Message) []*Message {
	out := make([]*Message, len(ms))
	for i, m := range ms {
		out[i] = FromMessage(m)
	}
	return out
}

func fromMessageNoPayload(m *domain.Message) *Message {
	h := m.Headers
	if h[HeaderPayloadFormat] == PayloadFormatJSON {
		h = withoutHeader(h, HeaderPayloadFormat)
	}
	return &Message{
		ID: m.ID, Topic: m.Topic, Headers: h,
		DeliverAt: answerTime(m.DeliverAt), State: string(m.State),
		Attempt: m.Attempt, Failures: m.Failures, MaxAttempts: m.MaxAttempts, Priority: m.Priority,
		LastError: m.LastError, CreatedAt: answerTime(m.CreatedAt), UpdatedAt: answerTime(m.UpdatedAt),
		Receipt: m.Receipt, LeaseExpiresAt: optTime(m.LeaseExpiresAt), Duplicate: m.Duplicate,
	}
}

// ToDomain is the message an answer carries.
func (w *Message) ToDomain() *domain.Message {
	payload, headers := answerPayload(w.Payload, w.PayloadBase64), w.Headers
	if w.PayloadJSON != nil {
		payload = w.PayloadJSON
		headers = make(map[string]string, len(w.Headers)+1)
		for k, v := range w.Headers {
			headers[k] = v
		}
		headers[HeaderPayloadFormat] = PayloadFormatJSON
	}
	return &domain.Message{
		Topic: w.Topic, ID: w.ID, Payload: payload, Headers: headers,
		DeliverAt: w.DeliverAt, State: domain.State(w.State),
		Attempt: w.Attempt, Failures: w.Failures, MaxAttempts: w.MaxAttempts, Priority: w.Priority, LastError: w.LastError,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		Receipt: w.Receipt, LeaseExpiresAt: fromOptTime(w.LeaseExpiresAt), Duplicate: w.Duplicate,
	}
}

// NewPushBody is the body pushed for m: the message's fields a receiver
// needs, mapped as in answers.
func NewPushBody(m *domain.Message) *PushBody {
	w := FromMessage(m)
	return &PushBody{
		ID: w.ID, Topic: w.Topic, Payload: w.Payload, PayloadBase64: w.PayloadBase64, PayloadJSON: w.PayloadJSON, Headers: w.Headers,
		Attempt: w.Attempt, MaxAttempts: w.MaxAttempts, Priority: m.Priority, DeliverAt: w.DeliverAt, CreatedAt: w.CreatedAt,
	}
}

// --- Sends and due times.

// FromSendRequest is r as a request carries it. DeliverAt is rounded up
// to the millisecond. r must not give both a delay and DeliverAt.
func FromSendRequest(r domain.SendRequest) (*SendRequest, error) {
	w := &SendRequest{Headers: r.Headers}
	if r.ID != "" {
		w.ID = &r.ID
	}
	w.Payload, w.PayloadBase64 = EncodePayload(r.Payload)
	if r.When.Delay != 0 && !r.When.DeliverAt.IsZero() {
		return nil, errBothWhen()
	}
	w.Delay, w.DeliverAt = FromWhen(r.When)
	if r.MaxAttempts != 0 {
		n := r.MaxAttempts
		w.MaxAttempts = &n
	}
	if r.Priority != 0 {
		n := r.Priority
		w.Priority = &n
	}
	return w, nil
}

func errBothWhen() error {
	return domain.Invalid("when", "give either a delay or a deliver_at time, not both")
}

// MarshalSendBatch is the reference encoding of a batch send's body
// (encoding/json on the FromSendRequest values); EncodeSendBatch writes
// the same bytes faster.
func MarshalSendBatch(reqs []domain.SendRequest) ([]byte, error) {
	body := struct {
		Messages []*SendRequest `json:"messages"`
	}{Messages: make([]*SendRequest, len(reqs))}
	for i, r := range reqs {
		w, err := FromSendRequest(r)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		body.Messages[i] = w
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("delayq: encode request: %w", err)
	}
	return b, nil
}

// FromWhen maps a due time to the "delay" or "deliver_at" field (neither:
// due now). DeliverAt is rounded up to the millisecond, so rounding can
// never make a message early.
func FromWhen(w domain.When) (*Duration, *time.Time) {
	if !w.DeliverAt.IsZero() {
		t := ceilMillis(w.DeliverAt).UTC()
		return nil, &t
	}
	return optDuration(w.Delay), nil
}

// decodeAnyPayload reads the payload a request gives in one of its three
// forms. A payload_json is stored compacted, with the HeaderPayloadFormat
// header added to headers (a copy) so that answers carry it as JSON again.
func decodeAnyPayload(text, b64 *string, asJSON json.RawMessage, headers map[string]string) ([]byte, map[string]string, error) {
	if asJSON == nil || string(asJSON) == "null" {
		p, err := DecodePayload(text, b64)
		return p, headers, err
	}
	if text != nil || b64 != nil {
		return nil, nil, domain.Invalid("payload_json", "give one of payload, payload_base64 and payload_json")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, asJSON); err != nil {
		return nil, nil, domain.Invalid("payload_json", "is not JSON: %v", err)
	}
	h := make(map[string]string, len(headers)+1)
	for k, v := range headers {
		h[k] = v
	}
	h[HeaderPayloadFormat] = PayloadFormatJSON
	return buf.Bytes(), h, nil
}

// encodeAnyPayload is the inverse: payload_json (and headers without the
// marker) for a payload sent so, else text or base64.
func encodeAnyPayload(p []byte, headers map[string]string) (text, b64 *string, asJSON json.RawMessage, h map[string]string) {
	if headers[HeaderPayloadFormat] == PayloadFormatJSON && json.Valid(p) {
		return nil, nil, p, withoutHeader(headers, HeaderPayloadFormat)
	}
	text, b64 = EncodePayload(p)
	return text, b64, nil, headers
}

// ToDomain is the send a request asks for. Only the shape is checked
// here; the engine checks the rest.
func (in *SendRequest) ToDomain() (domain.SendRequest, error) {
	out := domain.SendRequest{Headers: in.Headers}
	if in.ID != nil {
		// Present means meant: "" is refused, not taken as "make one up"
		// (the domain's empty ID), so that an unset variable in the caller
		// cannot silently turn off idempotency.
		if *in.ID == "" {
			return out, domain.Invalid("id", "must not be empty")
		}
		out.ID = *in.ID
	}
	var err error
	if in.fastPayload != nil { // the one form given, decoded (decodeFastPayload)
		out.Payload = in.fastPayload
	} else if out.Payload, out.Headers, err = decodeAnyPayload(in.Payload, in.PayloadBase64, in.PayloadJSON, in.Headers); err != nil {
		return out, err
	}
	if out.When, err = toWhen(in.Delay, in.DelayMS, in.DeliverAt); err != nil {
		return out, err
	}
	if in.MaxAttempts != nil {
		// 0 is the domain's "the topic's setting": absent says that here.
		if *in.MaxAttempts < 1 {
			return out, domain.Invalid("max_attempts", "must be at least 1 (omit it for the topic's setting)")
		}
		out.MaxAttempts = *in.MaxAttempts
	}
	if in.Priority != nil {
		out.Priority = *in.Priority // its range: domain.Limits.CheckSend
	}
	return out, nil
}

// NameFields words an error about this request (the engine's, in the
// domain's terms) in the request's: a delay given as delay_ms is named
// "delay_ms".
func (in *SendRequest) NameFields(err error) error { return nameDelay(err, in.DelayMS) }

// ToDomain is the due time a reschedule asks for (one is required).
func (in *RescheduleRequest) ToDomain() (domain.When, error) {
	if in.Delay == nil && in.DelayMS == nil && in.DeliverAt == nil {
		return domain.When{}, domain.Invalid("delay", "give one of delay, delay_ms and deliver_at")
	}
	return toWhen(in.Delay, in.DelayMS, in.DeliverAt)
}

// NameFields is SendRequest.NameFields for a reschedule.
func (in *RescheduleRequest) NameFields(err error) error { return nameDelay(err, in.DelayMS) }

// maxDelayMS is the longest delay_ms a time.Duration holds.
const maxDelayMS = math.MaxInt64 / int64(time.Millisecond)

// toWhen resolves at most one of delay, delay_ms and deliver_at.
func toWhen(delay *Duration, delayMS *int64, at *time.Time) (domain.When, error) {
	n := 0
	for _, set := range []bool{delay != nil, delayMS != nil, at != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return domain.When{}, domain.Invalid("delay", "give only one of delay, delay_ms and deliver_at")
	}
	switch {
	case delay != nil:
		return domain.When{Delay: time.Duration(*delay)}, nil
	case delayMS != nil:
		// Checked before multiplying: 9223372036854775807 ms must not wrap.
		if *delayMS < 0 {
			return domain.When{}, domain.Invalid("delay_ms", "must not be negative")
		}
		if *delayMS > maxDelayMS {
			return domain.When{}, domain.Invalid("delay_ms", "%d ms is beyond the maximum delay", *delayMS)
		}
		return domain.When{Delay: time.Duration(*delayMS) * time.Millisecond}, nil
	case at != nil:
		// The zero time is the domain's "no deliver_at".
		if at.IsZero() {
			return domain.When{}, domain.Invalid("deliver_at", "must not be the zero time")
		}
		return domain.When{DeliverAt: *at}, nil
	}
	return domain.When{}, nil
}

func nameDelay(err error, delayMS *int64) error {
	var ie *domain.InvalidError
	if delayMS == nil || !errors.As(err, &ie) || ie.Field != "delay" {
		return err
	}
	// The engine words the delay as a duration; the request gave ms.
	reason := ie.Reason
	if rest, ok := strings.CutPrefix(reason, (time.Duration(*delayMS) * time.Millisecond).String()); ok {
		reason = strconv.FormatInt(*delayMS, 10) + " ms" + rest
	}
	return &domain.InvalidError{Field: "delay_ms", Reason: reason}
}

// NewLeaseRequest is r as POST …/lease carries it (zero fields left out:
// the server's defaults).
func NewLeaseRequest(r domain.LeaseRequest) *LeaseRequest {
	w := &LeaseRequest{Lease: optDuration(r.Lease), Wait: optDuration(r.Wait)}
	if r.Max != 0 {
		w.Max = &r.Max
	}
	return w
}

// --- Topics and their settings.

// FromTopicSettings is s as answers carry it: every duration also in
// whole milliseconds (*_ms). The push secret is write-only: answers say
// only whether one is set (secret_set).
func FromTopicSettings(s domain.TopicSettings) TopicSettings {
	w := fromTopicSettings(s)
	if w.Lease != nil {
		w.LeaseMS = msOf(*w.Lease)
	}
	if b := w.Backoff; b != nil {
		// Answers carry every field, defaults filled in.
		initial, jitter := Duration(s.Backoff.Initial), s.Backoff.Jitter
		b.Initial, b.Jitter = &initial, &jitter
		b.InitialMS, b.MaxMS = msOf(initial), msOf(b.Max)
	}
	if p := s.Push; p != nil {
		w.Push.Secret = ""
		w.Push.SecretSet = p.SecretSet || p.Secret != ""
		if w.Push.Timeout != 0 { // as "timeout": left out when zero
			w.Push.TimeoutMS = msOf(w.Push.Timeout)
		}
	}
	if s.Deliver != nil {
		w.Deliver = fromDeliver(s.Deliver.Redacted())
	}
	return w
}

// msOf is d in whole milliseconds, as the *_ms answer fields carry it.
func msOf(d Duration) *int64 {
	ms := time.Duration(d).Milliseconds()
	return &ms
}

// ResolveMS reads the *_ms fields of a PUT /v1/topics/{topic} body: a
// duration given only in milliseconds is taken from there (an absent or
// zero duration string counts as not given), and one given both ways must
// say the same to the millisecond, else the request is refused rather
// than one of the two silently ignored.
func (w *TopicSettings) ResolveMS() error {
	if w.LeaseMS != nil {
		var lease Duration
		if w.Lease != nil {
			lease = *w.Lease
		}
		if err := resolveMS(&lease, w.LeaseMS, "lease"); err != nil {
			return err
		}
		w.Lease = &lease
	}
	if b := w.Backoff; b != nil && b.InitialMS != nil {
		var initial Duration
		if b.Initial != nil {
			initial = *b.Initial
		}
		if err := resolveMS(&initial, b.InitialMS, "backoff.initial"); err != nil {
			return err
		}
		b.Initial = &initial
	}
	if b := w.Backoff; b != nil {
		if err := resolveMS(&b.Max, b.MaxMS, "backoff.max"); err != nil {
			return err
		}
	}
	if p := w.Push; p != nil {
		if err := resolveMS(&p.Timeout, p.TimeoutMS, "push.timeout"); err != nil {
			return err
		}
	}
	if d := w.Deliver; d != nil && (d.TimeoutMS < 0 || d.TimeoutMS > maxDelayMS) {
		return domain.Invalid("deliver.timeout_ms", "must be between 1 and %d", domain.MaxDeliverTimeout.Milliseconds())
	}
	return nil
}

// resolveMS sets *d from ms when *d is zero, or checks that they agree.
func resolveMS(d *Duration, ms *int64, field string) error {
	switch {
	case ms == nil:
		return nil
	case *ms < 0:
		return domain.Invalid(field+"_ms", "must not be negative")
	case *ms > maxDelayMS:
		return domain.Invalid(field+"_ms", "%d ms is more than a duration holds", *ms)
	case *d == 0:
		*d = Duration(time.Duration(*ms) * time.Millisecond)
		return nil
	case time.Duration(*d).Milliseconds() != *ms:
		return domain.Invalid(field+"_ms", "is %d but %s is %s; give one of them, or both saying the same", *ms, field, time.Duration(*d))
	}
	return nil
}

// NewTopicSettingsRequest is s as PUT /v1/topics/{topic} carries it: with
// the push secret, and without secret_set (an answer's field).
func NewTopicSettingsRequest(s domain.TopicSettings) *TopicSettings {
	w := fromTopicSettings(s)
	if w.Push != nil {
		w.Push.SecretSet = false
	}
	if s.Deliver != nil {
		w.Deliver = fromDeliver(s.Deliver)
		clearSetFlags(w.Deliver)
	}
	return &w
}

// clearSetFlags drops the answer-only *_set fields of a request.
func clearSetFlags(d *Deliver) {
	if d.Kafka != nil && d.Kafka.SASL != nil {
		d.Kafka.SASL.PasswordSet = false
	}
	if d.NATS != nil {
		d.NATS.PasswordSet, d.NATS.TokenSet = false, false
	}
	if d.Redis != nil {
		d.Redis.PasswordSet = false
	}
}

func fromTLS(t *domain.TLSSettings) *DeliverTLS {
	if t == nil {
		return nil
	}
	return &DeliverTLS{CAPEM: t.CAPEM, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
}

func toTLS(t *DeliverTLS) *domain.TLSSettings {
	if t == nil {
		return nil
	}
	return &domain.TLSSettings{CAPEM: t.CAPEM, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
}

// fromDeliver maps every field as it is (redact first for answers).
func fromDeliver(d *domain.DeliverSettings) *Deliver {
	w := &Deliver{MaxInFlight: d.MaxInFlight, TimeoutMS: d.Timeout.Milliseconds()}
	if k := d.Kafka; k != nil {
		w.Kafka = &DeliverKafka{Brokers: append([]string(nil), k.Brokers...), Topic: k.Topic, KeyHeader: k.KeyHeader, TLS: fromTLS(k.TLS)}
		if s := k.SASL; s != nil {
			w.Kafka.SASL = &DeliverSASL{Mechanism: s.Mechanism, User: s.User, Password: s.Password, PasswordSet: s.PasswordSet}
		}
	}
	if r := d.RabbitMQ; r != nil {
		w.RabbitMQ = &DeliverRabbitMQ{URL: r.URL, Exchange: r.Exchange, RoutingKey: r.RoutingKey, TLS: fromTLS(r.TLS)}
	}
	if n := d.NATS; n != nil {
		w.NATS = &DeliverNATS{URL: n.URL, Subject: n.Subject, User: n.User, Password: n.Password, PasswordSet: n.PasswordSet,
			Token: n.Token, TokenSet: n.TokenSet, TLS: fromTLS(n.TLS)}
	}
	if r := d.Redis; r != nil {
		w.Redis = &DeliverRedis{Addr: r.Addr, Stream: r.Stream, MaxLen: r.MaxLen, Username: r.Username, Password: r.Password,
			PasswordSet: r.PasswordSet, DB: r.DB, TLS: fromTLS(r.TLS)}
	}
	return w
}

// ToDomain is the deliver settings w carries.
func (w *Deliver) ToDomain() *domain.DeliverSettings {
	d := &domain.DeliverSettings{MaxInFlight: w.MaxInFlight, Timeout: time.Duration(w.TimeoutMS) * time.Millisecond}
	if k := w.Kafka; k != nil {
		d.Kafka = &domain.KafkaTarget{Brokers: append([]string(nil), k.Brokers...), Topic: k.Topic, KeyHeader: k.KeyHeader, TLS: toTLS(k.TLS)}
		if s := k.SASL; s != nil {
			d.Kafka.SASL = &domain.KafkaSASL{Mechanism: s.Mechanism, User: s.User, Password: s.Password, PasswordSet: s.PasswordSet}
		}
	}
	if r := w.RabbitMQ; r != nil {
		d.RabbitMQ = &domain.RabbitMQTarget{URL: r.URL, Exchange: r.Exchange, RoutingKey: r.RoutingKey, TLS: toTLS(r.TLS)}
	}
	if n := w.NATS; n != nil {
		d.NATS = &domain.NATSTarget{URL: n.URL, Subject: n.Subject, User: n.User, Password: n.Password, PasswordSet: n.PasswordSet,
			Token: n.Token, TokenSet: n.TokenSet, TLS: toTLS(n.TLS)}
	}
	if r := w.Redis; r != nil {
		d.Redis = &domain.RedisTarget{Addr: r.Addr, Stream: r.Stream, MaxLen: r.MaxLen, Username: r.Username, Password: r.Password,
			PasswordSet: r.PasswordSet, DB: r.DB, TLS: toTLS(r.TLS)}
	}
	return d
}

// fromTopicSettings maps every field; zero durations and backoff are left
// out (the server's answers fill them with its defaults).
func fromTopicSettings(s domain.TopicSettings) TopicSettings {
	w := TopicSettings{MaxAttempts: s.MaxAttempts, Lease: optDuration(s.Lease)}
	if b := s.Backoff; b != (domain.Backoff{}) {
		w.Backoff = &Backoff{Max: Duration(b.Max), Multiplier: b.Multiplier}
		if b.Initial != 0 || b.InitialSet {
			initial := Duration(b.Initial)
			w.Backoff.Initial = &initial
		}
		if b.Jitter != 0 || b.JitterSet {
			jitter := b.Jitter
			w.Backoff.Jitter = &jitter
		}
	}
	if r := s.RateLimit; r != nil {
		w.RateLimit = &RateLimit{PerSecond: r.PerSecond, Burst: r.Burst}
	}
	if p := s.Push; p != nil {
		w.Push = &Push{URL: p.URL, Timeout: Duration(p.Timeout), Concurrency: p.Concurrency, Secret: p.Secret, SecretSet: p.SecretSet}
	}
	return w
}

// ToDomain is the settings a request or an answer carries. (secret_set is
// answer-only: the engine ignores it on input, so a topic read, changed
// and written back keeps its secret.)
func (w *TopicSettings) ToDomain() domain.TopicSettings {
	s := domain.TopicSettings{MaxAttempts: w.MaxAttempts}
	if w.Lease != nil {
		s.Lease = time.Duration(*w.Lease)
	}
	if b := w.Backoff; b != nil {
		s.Backoff = domain.Backoff{Max: time.Duration(b.Max), Multiplier: b.Multiplier}
		if b.Initial != nil {
			s.Backoff.Initial, s.Backoff.InitialSet = time.Duration(*b.Initial), true
		}
		if b.Jitter != nil {
			s.Backoff.Jitter, s.Backoff.JitterSet = *b.Jitter, true
		}
	}
	if r := w.RateLimit; r != nil {
		s.RateLimit = &domain.RateLimit{PerSecond: r.PerSecond, Burst: r.Burst}
	}
	if p := w.Push; p != nil {
		s.Push = &domain.PushSettings{URL: p.URL, Timeout: time.Duration(p.Timeout), Concurrency: p.Concurrency, Secret: p.Secret, SecretSet: p.SecretSet}
	}
	if d := w.Deliver; d != nil {
		s.Deliver = d.ToDomain()
	}
	return s
}

// FromTopicInfo is t as answers carry it; now dates the oldest ready
// message's age.
func FromTopicInfo(t *domain.TopicInfo, now time.Time) Topic {
	w := Topic{
		Name: t.Name,
		Counts: Counts{Scheduled: t.Counts.Scheduled, Ready: t.Counts.Ready,
			Inflight: t.Counts.Inflight, Dead: t.Counts.Dead},
		NextDue:  optTime(t.NextDue),
		Settings: FromTopicSettings(t.Settings),
		Paused:   t.Paused,
	}
	if !t.OldestReady.IsZero() {
		age := max(now.Sub(t.OldestReady).Milliseconds(), 0)
		w.OldestReadyAgeMS = &age
	}
	return w
}

// ToDomain is the topic an answer carries; OldestReady is dated from the
// answer's age and now.
func (w *Topic) ToDomain(now time.Time) domain.TopicInfo {
	t := domain.TopicInfo{
		Name: w.Name,
		Counts: domain.TopicCounts{Scheduled: w.Counts.Scheduled, Ready: w.Counts.Ready,
			Inflight: w.Counts.Inflight, Dead: w.Counts.Dead},
		Settings: w.Settings.ToDomain(),
		NextDue:  fromOptTime(w.NextDue),
		Paused:   w.Paused,
	}
	if w.OldestReadyAgeMS != nil {
		t.OldestReady = now.Add(-time.Duration(*w.OldestReadyAgeMS) * time.Millisecond)
	}
	return t
}

// --- Recurring schedules.

// FromSchedule is s as answers carry it.
func FromSchedule(s *domain.Schedule) *Schedule {
	w := &Schedule{
		Name: s.Name, Topic: s.Topic, Cron: s.Cron, Timezone: s.Timezone, Headers: s.Headers,
		MaxAttempts: s.MaxAttempts, Priority: s.Priority, Paused: s.Paused, Missed: string(s.Missed),
		LastTick: optTime(s.LastTick), NextTick: optTime(s.NextTick),
		CreatedAt: optTime(s.CreatedAt), UpdatedAt: optTime(s.UpdatedAt),
	}
	if s.Delay > 0 {
		w.Delay = optDuration(s.Delay)
		w.DelayMS = msOf(*w.Delay)
	}
	w.Payload, w.PayloadBase64, w.PayloadJSON, w.Headers = encodeAnyPayload(s.Payload, s.Headers)
	return w
}

// ToDomain is the schedule an answer carries.
func (w *Schedule) ToDomain() *domain.Schedule {
	s := &domain.Schedule{
		Name: w.Name, Topic: w.Topic, Cron: w.Cron, Timezone: w.Timezone,
		Payload: answerPayload(w.Payload, w.PayloadBase64), Headers: w.Headers,
		MaxAttempts: w.MaxAttempts, Priority: w.Priority, Paused: w.Paused, Missed: domain.MissedPolicy(w.Missed),
		LastTick: fromOptTime(w.LastTick), NextTick: fromOptTime(w.NextTick),
		CreatedAt: fromOptTime(w.CreatedAt), UpdatedAt: fromOptTime(w.UpdatedAt),
	}
	if w.Delay != nil {
		s.Delay = time.Duration(*w.Delay)
	}
	if w.PayloadJSON != nil {
		s.Payload, s.Headers, _ = decodeAnyPayload(nil, nil, w.PayloadJSON, w.Headers)
	}
	return s
}

// NewScheduleRequest is s as PUT /v1/schedules/{name} carries it (the
// name goes in the path).
func NewScheduleRequest(s domain.Schedule) *ScheduleRequest {
	w := &ScheduleRequest{Topic: s.Topic, Cron: s.Cron, Timezone: s.Timezone, Headers: s.Headers,
		Missed: string(s.Missed), Paused: &s.Paused, Delay: optDuration(s.Delay)}
	w.Payload, w.PayloadBase64 = EncodePayload(s.Payload)
	if s.MaxAttempts != 0 {
		w.MaxAttempts = &s.MaxAttempts
	}
	if s.Priority != 0 {
		w.Priority = &s.Priority
	}
	return w
}

// ToDomain is the schedule named name that a PUT asks for. Only the shape
// is checked here; the engine checks the rest.
func (in *ScheduleRequest) ToDomain(name string) (domain.Schedule, error) {
	out := domain.Schedule{Name: name, Topic: in.Topic, Cron: in.Cron, Timezone: in.Timezone,
		Headers: in.Headers, Missed: domain.MissedPolicy(in.Missed)}
	if in.Topic == "" {
		return out, domain.Invalid("topic", "is required")
	}
	if in.Cron == "" {
		return out, domain.Invalid("cron", "is required, e.g. \"0 9 * * 1-5\" or \"@every 10m\"")
	}
	var err error
	if out.Payload, out.Headers, err = decodeAnyPayload(in.Payload, in.PayloadBase64, in.PayloadJSON, in.Headers); err != nil {
		return out, err
	}
	if in.MaxAttempts != nil {
		if *in.MaxAttempts < 1 {
			return out, domain.Invalid("max_attempts", "must be at least 1 (omit it for the topic's setting)")
		}
		out.MaxAttempts = *in.MaxAttempts
	}
	if in.Priority != nil {
		out.Priority = *in.Priority // its range: the engine
	}
	if in.Delay != nil {
		out.Delay = time.Duration(*in.Delay)
	}
	if in.Paused != nil {
		out.Paused = *in.Paused
	}
	return out, nil
}

// ToDomain is the filter a bulk request or a listing asks for.
func (f *MessageFilter) ToDomain() domain.MessageFilter {
	out := domain.MessageFilter{State: domain.State(f.State)}
	if f.DueAfter != nil {
		out.DueAfter = *f.DueAfter
	}
	if f.DueBefore != nil {
		out.DueBefore = *f.DueBefore
	}
	return out
}
