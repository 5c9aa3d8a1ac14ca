package delayq

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/wire"
)

// Conversions between the package's types and the JSON shapes of
// internal/wire, as used by Client.

func sendRequestToWire(r SendRequest) (*wire.SendRequest, error) {
	w := &wire.SendRequest{Headers: r.Headers}
	if r.ID != "" {
		w.ID = &r.ID
	}
	// Text goes as "payload" so it stays readable in logs and the
	// dashboard; anything else as "payload_base64".
	if utf8.Valid(r.Payload) {
		s := string(r.Payload)
		w.Payload = &s
	} else {
		s := base64.StdEncoding.EncodeToString(r.Payload)
		w.PayloadBase64 = &s
	}
	if r.When.Delay != 0 && !r.When.DeliverAt.IsZero() {
		return nil, Invalid("when", "give either a delay or a deliver_at time, not both")
	}
	w.Delay, w.DeliverAt = whenToWire(r.When)
	if r.MaxAttempts != 0 {
		n := r.MaxAttempts
		w.MaxAttempts = &n
	}
	return w, nil
}

// errNeedJSON: appendSendRequest met a value only encoding/json words
// the error for (a time outside years 0–9999); encodeSendBatch falls back.
var errNeedJSON = errors.New("delayq: value needs encoding/json")

// encodeSendBatch encodes {"messages":[…]} with the hand-written
// encoder: the same bytes as json.Marshal of the sendRequestToWire
// values (client_wire_test.go compares them), with no intermediate
// structs, payload copies or reflection. reqs must have their IDs.
func encodeSendBatch(reqs []SendRequest) ([]byte, error) {
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
		if b, err = appendSendRequest(b, &reqs[i]); err != nil {
			if errors.Is(err, errNeedJSON) {
				return encodeSendBatchJSON(reqs)
			}
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	return append(b, "]}"...), nil
}

// encodeSendBatchJSON is the reference encoding, through the wire types.
func encodeSendBatchJSON(reqs []SendRequest) ([]byte, error) {
	body := struct {
		Messages []*wire.SendRequest `json:"messages"`
	}{Messages: make([]*wire.SendRequest, len(reqs))}
	for i, r := range reqs {
		w, err := sendRequestToWire(r)
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

// appendSendRequest appends json.Marshal(sendRequestToWire(*r)).
func appendSendRequest(b []byte, r *SendRequest) ([]byte, error) {
	if r.When.Delay != 0 && !r.When.DeliverAt.IsZero() {
		return b, Invalid("when", "give either a delay or a deliver_at time, not both")
	}
	b = append(b, '{')
	if r.ID != "" {
		b = append(b, `"id":`...)
		b = wire.AppendString(b, r.ID)
		b = append(b, ',')
	}
	if utf8.Valid(r.Payload) {
		b = append(b, `"payload":`...)
		b = wire.AppendString(b, r.Payload)
	} else {
		// Base64's alphabet needs no JSON escaping.
		b = append(b, `"payload_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.Payload)
		b = append(b, '"')
	}
	if len(r.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = wire.AppendStringMap(b, r.Headers)
	}
	switch {
	case !r.When.DeliverAt.IsZero():
		b = append(b, `,"deliver_at":`...)
		var ok bool
		if b, ok = wire.AppendTime(b, ceilMillis(r.When.DeliverAt).UTC()); !ok {
			return b, errNeedJSON
		}
	case r.When.Delay != 0:
		b = append(b, `,"delay":`...)
		b = wire.AppendString(b, r.When.Delay.String())
	}
	if r.MaxAttempts != 0 {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(r.MaxAttempts), 10)
	}
	return append(b, '}'), nil
}

// whenToWire maps When to the "delay" or "deliver_at" field. DeliverAt is
// rounded up to the millisecond (the API's precision), so rounding can
// never make a message early.
func whenToWire(w When) (*wire.Duration, *time.Time) {
	if !w.DeliverAt.IsZero() {
		t := ceilMillis(w.DeliverAt).UTC()
		return nil, &t
	}
	if w.Delay != 0 {
		d := wire.Duration(w.Delay)
		return &d, nil
	}
	return nil, nil
}

func ceilMillis(t time.Time) time.Time {
	r := t.Truncate(time.Millisecond)
	if r.Before(t) {
		r = r.Add(time.Millisecond)
	}
	return r
}

func optDuration(d time.Duration) *wire.Duration {
	if d == 0 {
		return nil
	}
	w := wire.Duration(d)
	return &w
}

func messageFromWire(w *wire.Message) *Message {
	m := &Message{
		Topic:       w.Topic,
		ID:          w.ID,
		Headers:     w.Headers,
		DeliverAt:   w.DeliverAt,
		State:       State(w.State),
		Attempt:     w.Attempt,
		Failures:    w.Failures,
		MaxAttempts: w.MaxAttempts,
		LastError:   w.LastError,
		CreatedAt:   w.CreatedAt,
		UpdatedAt:   w.UpdatedAt,
		Receipt:     w.Receipt,
		Duplicate:   w.Duplicate,
	}
	switch {
	case w.Payload != nil:
		m.Payload = []byte(*w.Payload)
	case w.PayloadBase64 != nil:
		// A server never sends bad base64; if one did, an empty payload
		// would hide it, so keep the raw text instead.
		b, err := base64.StdEncoding.DecodeString(*w.PayloadBase64)
		if err != nil {
			b = []byte(*w.PayloadBase64)
		}
		m.Payload = b
	}
	if w.LeaseExpiresAt != nil {
		m.LeaseExpiresAt = *w.LeaseExpiresAt
	}
	return m
}

func topicFromWire(w *wire.Topic, now time.Time) TopicInfo {
	t := TopicInfo{
		Name: w.Name,
		Counts: TopicCounts{
			Scheduled: w.Counts.Scheduled,
			Ready:     w.Counts.Ready,
			Inflight:  w.Counts.Inflight,
			Dead:      w.Counts.Dead,
		},
		Settings: settingsFromWire(&w.Settings),
	}
	if w.NextDue != nil {
		t.NextDue = *w.NextDue
	}
	if w.OldestReadyAgeMS != nil {
		t.OldestReady = now.Add(-time.Duration(*w.OldestReadyAgeMS) * time.Millisecond)
	}
	return t
}

func settingsToWire(s TopicSettings) *wire.TopicSettings {
	w := &wire.TopicSettings{MaxAttempts: s.MaxAttempts, Lease: optDuration(s.Lease)}
	if s.Backoff != (Backoff{}) {
		w.Backoff = &wire.Backoff{
			Initial:    wire.Duration(s.Backoff.Initial),
			Max:        wire.Duration(s.Backoff.Max),
			Multiplier: s.Backoff.Multiplier,
			Jitter:     s.Backoff.Jitter,
		}
	}
	if s.RateLimit != nil {
		w.RateLimit = &wire.RateLimit{PerSecond: s.RateLimit.PerSecond, Burst: s.RateLimit.Burst}
	}
	if s.Push != nil {
		w.Push = &wire.Push{URL: s.Push.URL, Timeout: wire.Duration(s.Push.Timeout), Concurrency: s.Push.Concurrency, Secret: s.Push.Secret}
	}
	return w
}

func settingsFromWire(w *wire.TopicSettings) TopicSettings {
	s := TopicSettings{MaxAttempts: w.MaxAttempts}
	if w.Lease != nil {
		s.Lease = time.Duration(*w.Lease)
	}
	if b := w.Backoff; b != nil {
		s.Backoff = Backoff{Initial: time.Duration(b.Initial), Max: time.Duration(b.Max), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	if r := w.RateLimit; r != nil {
		s.RateLimit = &RateLimit{PerSecond: r.PerSecond, Burst: r.Burst}
	}
	if p := w.Push; p != nil {
		s.Push = &PushSettings{URL: p.URL, Timeout: time.Duration(p.Timeout), Concurrency: p.Concurrency, SecretSet: p.SecretSet}
	}
	return s
}
