package wire

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/domain"
)

// Hand-written encoders for the shapes of a batch send, the API's hottest
// path: the request (client side) and the answer (server side). They
// write exactly the bytes encoding/json writes for the same value (tests
// compare them), without reflection. ok is false where json.Marshal would
// fail (a time outside years 0–9999); callers then fall back to it.

// AppendSendBatchRequest appends {"messages":[…]} as json.Marshal writes
// a struct with one field `json:"messages"` of type []*SendRequest.
func AppendSendBatchRequest(b []byte, msgs []*SendRequest) ([]byte, bool) {
	b = append(b, `{"messages":`...)
	if msgs == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = AppendSendRequest(b, m); !ok {
			return b, false
		}
	}
	return append(b, "]}"...), true
}

// EncodeSendBatch encodes a batch send's body for reqs: the bytes
// MarshalSendBatch writes (tests compare them), with no intermediate
// structs, payload copies or reflection. A value only encoding/json words
// the error for (a time outside years 0–9999) makes it use
// MarshalSendBatch.
func EncodeSendBatch(reqs []domain.SendRequest) ([]byte, error) {
	size := 32
	for i := range reqs {
		size += base64.StdEncoding.EncodedLen(len(reqs[i].Payload)) + len(reqs[i].ID) + 96
	}
	b := append(make([]byte, 0, size), `{"messages":[`...)
	for i := range reqs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendDomainSendRequest(b, &reqs[i]); err != nil {
			if errors.Is(err, errNeedJSON) {
				return MarshalSendBatch(reqs)
			}
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	return append(b, "]}"...), nil
}

// errNeedJSON: appendDomainSendRequest met a value only encoding/json
// words the error for.
var errNeedJSON = errors.New("delayq: value needs encoding/json")

// appendDomainSendRequest appends json.Marshal(FromSendRequest(*r)).
func appendDomainSendRequest(b []byte, r *domain.SendRequest) ([]byte, error) {
	if r.When.Delay != 0 && !r.When.DeliverAt.IsZero() {
		return b, errBothWhen()
	}
	b = append(b, '{')
	if r.ID != "" {
		b = append(b, `"id":`...)
		b = AppendString(b, r.ID)
		b = append(b, ',')
	}
	if utf8.Valid(r.Payload) { // as EncodePayload
		b = append(b, `"payload":`...)
		b = AppendString(b, r.Payload)
	} else {
		// Base64's alphabet needs no JSON escaping.
		b = append(b, `"payload_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.Payload)
		b = append(b, '"')
	}
	if len(r.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = AppendStringMap(b, r.Headers)
	}
	switch { // as FromWhen, without its pointers
	case !r.When.DeliverAt.IsZero():
		b = append(b, `,"deliver_at":`...)
		var ok bool
		if b, ok = AppendTime(b, ceilMillis(r.When.DeliverAt).UTC()); !ok {
			return b, errNeedJSON
		}
	case r.When.Delay != 0:
		b = append(b, `,"delay":`...)
		b = AppendString(b, r.When.Delay.String())
	}
	if r.MaxAttempts != 0 {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(r.MaxAttempts), 10)
	}
	if r.Priority != 0 {
		b = append(b, `,"priority":`...)
		b = strconv.AppendInt(b, int64(r.Priority), 10)
	}
	return append(b, '}'), nil
}

// AppendSendRequest appends m as json.Marshal(m) writes it.
func AppendSendRequest(b []byte, m *SendRequest) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	start := len(b)
	b = append(b, '{')
	field := func(name string) {
		if len(b) > start+1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	if m.ID != nil {
		field("id")
		b = AppendString(b, *m.ID)
	}
	if m.Payload != nil {
		field("payload")
		b = AppendString(b, *m.Payload)
	}
	if m.PayloadBase64 != nil {
		field("payload_base64")
		b = AppendString(b, *m.PayloadBase64)
	}
	if len(m.Headers) > 0 {
		field("headers")
		b = AppendStringMap(b, m.Headers)
	}
	if m.Delay != nil {
		field("delay")
		b = AppendString(b, time.Duration(*m.Delay).String())
	}
	if m.DelayMS != nil {
		field("delay_ms")
		b = strconv.AppendInt(b, *m.DelayMS, 10)
	}
	if m.DeliverAt != nil {
		field("deliver_at")
		var ok bool
		if b, ok = AppendTime(b, *m.DeliverAt); !ok {
			return b, false
		}
	}
	if m.MaxAttempts != nil {
		field("max_attempts")
		b = strconv.AppendInt(b, int64(*m.MaxAttempts), 10)
	}
	if m.Priority != nil {
		field("priority")
		b = strconv.AppendInt(b, int64(*m.Priority), 10)
	}
	return append(b, '}'), true
}

// AppendSendBatchResponse appends r as json.Marshal(r) writes it.
func AppendSendBatchResponse(b []byte, r *SendBatchResponse) ([]byte, bool) {
	b = append(b, `{"results":`...)
	if r.Results == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	for i := range r.Results {
		if i > 0 {
			b = append(b, ',')
		}
		res := &r.Results[i]
		b = append(b, '{')
		if res.Message != nil {
			b = append(b, `"message":`...)
			var ok bool
			if b, ok = AppendMessage(b, res.Message); !ok {
				return b, false
			}
		}
		if res.Error != nil {
			if res.Message != nil {
				b = append(b, ',')
			}
			b = append(b, `"error":`...)
			b = appendErrorBody(b, res.Error)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), true
}

// AppendMessage appends m as json.Marshal(m) writes it.
func AppendMessage(b []byte, m *Message) ([]byte, bool) {
	if m.PayloadJSON != nil {
		return b, false // json.Marshal's HTML escaping of the raw value: not worth copying here
	}
	var ok bool
	b = append(b, `{"id":`...)
	b = AppendString(b, m.ID)
	b = append(b, `,"topic":`...)
	b = AppendString(b, m.Topic)
	if m.Payload != nil {
		b = append(b, `,"payload":`...)
		b = AppendString(b, *m.Payload)
	}
	if m.PayloadBase64 != nil {
		b = append(b, `,"payload_base64":`...)
		b = AppendString(b, *m.PayloadBase64)
	}
	if len(m.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = AppendStringMap(b, m.Headers)
	}
	b = append(b, `,"deliver_at":`...)
	if b, ok = AppendTime(b, m.DeliverAt); !ok {
		return b, false
	}
	b = appendDelivery(b, m.State, int64(m.Attempt), int64(m.Failures), int64(m.MaxAttempts), int64(m.Priority), m.LastError)
	b = append(b, `,"created_at":`...)
	if b, ok = AppendTime(b, m.CreatedAt); !ok {
		return b, false
	}
	b = append(b, `,"updated_at":`...)
	if b, ok = AppendTime(b, m.UpdatedAt); !ok {
		return b, false
	}
	if m.Receipt != "" {
		b = append(b, `,"receipt":`...)
		b = AppendString(b, m.Receipt)
	}
	if m.LeaseExpiresAt != nil {
		b = append(b, `,"lease_expires_at":`...)
		if b, ok = AppendTime(b, *m.LeaseExpiresAt); !ok {
			return b, false
		}
	}
	if m.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	return append(b, '}'), true
}

// AppendLeaseResponse appends the answer to a lease of ms, with the
// outcome of its acks, as json.Marshal(MessagesResponse{Messages:
// FromMessages(ms), Acks: acks}) writes it,
// straight from the domain messages: no Message values, and a binary
// payload base64-encoded into b rather than into a string first (a
// lease answer is the API's largest: a payload per message). ok is false
// where it would differ from FromMessage's mapping or json.Marshal would
// fail (a payload_json message, a time outside years 0–9999); callers
// then use encoding/json.
func AppendLeaseResponse(b []byte, ms []*domain.Message, acks []AckResult) ([]byte, bool) {
	b = append(b, `{"messages":[`...)
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendDomainMessage(b, m); !ok {
			return b, false
		}
	}
	b = append(b, ']')
	if len(acks) > 0 {
		b = append(b, `,"acks":[`...)
		for i := range acks {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendAckResult(b, &acks[i])
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

// appendDomainMessage appends json.Marshal(FromMessage(m)), or false for
// a message carrying the payload_json marker (FromMessage drops it from
// the headers and may answer payload_json).
func appendDomainMessage(b []byte, m *domain.Message) ([]byte, bool) {
	if _, marked := m.Headers[HeaderPayloadFormat]; marked {
		return b, false
	}
	var ok bool
	b = append(b, `{"id":`...)
	b = AppendString(b, m.ID)
	b = append(b, `,"topic":`...)
	b = AppendString(b, m.Topic)
	if utf8.Valid(m.Payload) {
		b = append(b, `,"payload":`...)
		b = AppendString(b, m.Payload)
	} else {
		// The base64 alphabet and '=' are all carried as they are.
		b = append(b, `,"payload_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, m.Payload)
		b = append(b, '"')
	}
	if len(m.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = AppendStringMap(b, m.Headers)
	}
	b = append(b, `,"deliver_at":`...)
	if b, ok = AppendTime(b, answerTime(m.DeliverAt)); !ok {
		return b, false
	}
	b = appendDelivery(b, string(m.State), int64(m.Attempt), int64(m.Failures), int64(m.MaxAttempts), int64(m.Priority), m.LastError)
	b = append(b, `,"created_at":`...)
	if b, ok = AppendTime(b, answerTime(m.CreatedAt)); !ok {
		return b, false
	}
	b = append(b, `,"updated_at":`...)
	if b, ok = AppendTime(b, answerTime(m.UpdatedAt)); !ok {
		return b, false
	}
	if m.Receipt != "" {
		b = append(b, `,"receipt":`...)
		b = AppendString(b, m.Receipt)
	}
	if !m.LeaseExpiresAt.IsZero() {
		b = append(b, `,"lease_expires_at":`...)
		if b, ok = AppendTime(b, answerTime(m.LeaseExpiresAt)); !ok {
			return b, false
		}
	}
	if m.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	return append(b, '}'), true
}

// appendDelivery appends a message's members from "state" to
// "last_error", which AppendMessage and appendDomainMessage share.
func appendDelivery(b []byte, state string, attempt, failures, maxAttempts, priority int64, lastError string) []byte {
	b = append(b, `,"state":`...)
	b = AppendString(b, state)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, attempt, 10)
	b = append(b, `,"failures":`...)
	b = strconv.AppendInt(b, failures, 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, maxAttempts, 10)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, priority, 10)
	if lastError != "" {
		b = append(b, `,"last_error":`...)
		b = AppendString(b, lastError)
	}
	return b
}

func appendErrorBody(b []byte, e *ErrorBody) []byte {
	b = append(b, `{"code":`...)
	b = AppendString(b, e.Code)
	b = append(b, `,"message":`...)
	b = AppendString(b, e.Message)
	if e.Field != "" {
		b = append(b, `,"field":`...)
		b = AppendString(b, e.Field)
	}
	if e.RequestID != "" {
		b = append(b, `,"request_id":`...)
		b = AppendString(b, e.RequestID)
	}
	return append(b, '}')
}

// AppendAckBatchResponse appends r as json.Marshal(r) writes it.
func AppendAckBatchResponse(b []byte, r *AckBatchResponse) []byte {
	b = append(b, `{"results":`...)
	if r.Results == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i := range r.Results {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendAckResult(b, &r.Results[i])
	}
	return append(b, "]}"...)
}

// AppendAckResult appends r as json.Marshal(r) writes it.
func AppendAckResult(b []byte, r *AckResult) []byte {
	b = append(b, `{"id":`...)
	b = AppendString(b, r.ID)
	if r.OK {
		b = append(b, `,"ok":true`...)
	} else {
		b = append(b, `,"ok":false`...)
	}
	if r.Error != nil {
		b = append(b, `,"error":`...)
		b = appendErrorBody(b, r.Error)
	}
	return append(b, '}')
}

// AppendTime writes t as time.Time.MarshalJSON does (RFC 3339 with
// sub-second digits as needed); false for a year outside 0–9999.
func AppendTime(b []byte, t time.Time) ([]byte, bool) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return b, false
	}
	return append(b, '"'), true
}

// AppendStringMap writes m with its keys sorted, as encoding/json does.
func AppendStringMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, k)
		b = append(b, ':')
		b = AppendString(b, m[k])
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// plain marks the ASCII bytes a JSON string carries as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendString writes s as a JSON string exactly as encoding/json does
// with HTML escaping on (its default): <, > and & as \u003c…, U+2028 and
// U+2029 escaped, invalid UTF-8 as \ufffd.
func AppendString[S ~string | ~[]byte](b []byte, s S) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		for i < len(s) && plain[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))])) // short: no copy escapes
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
