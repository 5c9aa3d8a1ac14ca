package httpapi

import (
	"encoding/base64"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// sendRequest converts and checks one send. prefix names the item in a
// batch ("messages[3]."), "" for a single send.
func (s *Server) sendRequest(in *wire.SendRequest, prefix string) (domain.SendRequest, error) {
	out := domain.SendRequest{Headers: in.Headers}
	if in.ID != nil {
		// Present means meant: "" is refused (ValidateID), not taken as
		// "make one up".
		if err := domain.ValidateID(*in.ID); err != nil {
			return out, prefixed(prefix, err)
		}
		out.ID = *in.ID
	}
	switch {
	case in.Payload != nil && in.PayloadBase64 != nil:
		return out, domain.Invalid(prefix+"payload", "give either payload or payload_base64, not both")
	case in.Payload != nil:
		out.Payload = []byte(*in.Payload)
	case in.PayloadBase64 != nil:
		b, err := strictBase64.DecodeString(*in.PayloadBase64)
		if err != nil {
			return out, domain.Invalid(prefix+"payload_base64", "is not standard padded base64: %v", err)
		}
		out.Payload = b
	default:
		return out, domain.Invalid(prefix+"payload", "is required (use \"payload\": \"\" for an empty one, or payload_base64)")
	}
	if len(out.Payload) > s.cfg.MaxPayload {
		return out, fmt.Errorf("%w: %spayload is %d bytes, the limit is %d", domain.ErrTooLarge, prefix, len(out.Payload), s.cfg.MaxPayload)
	}
	if err := checkHeaders(in.Headers, prefix); err != nil {
		return out, err
	}
	when, err := s.when(in.Delay, in.DelayMS, in.DeliverAt, prefix)
	if err != nil {
		return out, err
	}
	out.When = when
	if in.MaxAttempts != nil {
		if *in.MaxAttempts < 1 {
			return out, domain.Invalid(prefix+"max_attempts", "must be at least 1 (omit it for the topic's setting)")
		}
		out.MaxAttempts = *in.MaxAttempts
	}
	return out, nil
}

// strictBase64 is made once: Strict copies the encoding (its 256-byte
// decode table) on every call.
var strictBase64 = base64.StdEncoding.Strict()

func prefixed(prefix string, err error) error {
	if inv, ok := err.(*domain.InvalidError); ok && prefix != "" {
		return &domain.InvalidError{Field: prefix + inv.Field, Reason: inv.Reason}
	}
	return err
}

// when resolves at most one of delay, delay_ms and deliver_at.
func (s *Server) when(delay *wire.Duration, delayMS *int64, at *time.Time, prefix string) (domain.When, error) {
	n := 0
	for _, set := range []bool{delay != nil, delayMS != nil, at != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return domain.When{}, domain.Invalid(prefix+"delay", "give only one of delay, delay_ms and deliver_at")
	}
	switch {
	case delay != nil:
		return s.checkDelay(time.Duration(*delay), prefix+"delay")
	case delayMS != nil:
		// Compare before multiplying: 9223372036854775807 ms must not wrap.
		if *delayMS < 0 {
			return domain.When{}, domain.Invalid(prefix+"delay_ms", "must not be negative")
		}
		if *delayMS > s.cfg.MaxDelay.Milliseconds() {
			return domain.When{}, domain.Invalid(prefix+"delay_ms", "%d ms is beyond the maximum delay of %s", *delayMS, s.cfg.MaxDelay)
		}
		return domain.When{Delay: time.Duration(*delayMS) * time.Millisecond}, nil
	case at != nil:
		if at.IsZero() {
			return domain.When{}, domain.Invalid(prefix+"deliver_at", "must not be the zero time")
		}
		return domain.When{DeliverAt: *at}, nil
	}
	return domain.When{}, nil
}

func (s *Server) checkDelay(d time.Duration, field string) (domain.When, error) {
	if d < 0 {
		return domain.When{}, domain.Invalid(field, "must not be negative, got %s", d)
	}
	if d > s.cfg.MaxDelay {
		return domain.When{}, domain.Invalid(field, "%s is beyond the maximum delay of %s", d, s.cfg.MaxDelay)
	}
	return domain.When{Delay: d}, nil
}

// checkHeaders applies the header rules (domain.ValidateHeaders, the
// same the engine applies) with the item's prefix in the field name.
func checkHeaders(h map[string]string, prefix string) error {
	return prefixed(prefix, domain.ValidateHeaders(h))
}

// toWire converts a message for an answer: times in UTC with millisecond
// precision; the payload as a string when it is valid UTF-8, else base64.
func toWire(m *domain.Message) *wire.Message {
	out := toWireNoPayload(m)
	if utf8.Valid(m.Payload) {
		p := string(m.Payload)
		out.Payload = &p
	} else {
		p := base64.StdEncoding.EncodeToString(m.Payload)
		out.PayloadBase64 = &p
	}
	return out
}

func toWireNoPayload(m *domain.Message) *wire.Message {
	out := &wire.Message{
		ID: m.ID, Topic: m.Topic, Headers: m.Headers,
		DeliverAt: ms(m.DeliverAt), State: string(m.State),
		Attempt: m.Attempt, Failures: m.Failures, MaxAttempts: m.MaxAttempts,
		LastError: m.LastError, CreatedAt: ms(m.CreatedAt), UpdatedAt: ms(m.UpdatedAt),
		Receipt: m.Receipt, Duplicate: m.Duplicate,
	}
	if !m.LeaseExpiresAt.IsZero() {
		t := ms(m.LeaseExpiresAt)
		out.LeaseExpiresAt = &t
	}
	return out
}

// toSendWire answers a send: the message without its payload, which the
// producer has just sent (echoing it doubled the bytes of every batch
// answer). A duplicate keeps it: the stored payload may differ from the
// one in this request.
func toSendWire(m *domain.Message) *wire.Message {
	if m.Duplicate {
		return toWire(m)
	}
	return toWireNoPayload(m) // not encoded only to be dropped
}

func toWireList(ms []*domain.Message) []*wire.Message {
	out := make([]*wire.Message, len(ms))
	for i, m := range ms {
		out[i] = toWire(m)
	}
	return out
}

func ms(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}

func settingsToWire(s domain.TopicSettings) wire.TopicSettings {
	lease := wire.Duration(s.Lease)
	out := wire.TopicSettings{
		MaxAttempts: s.MaxAttempts,
		Backoff: &wire.Backoff{
			Initial: wire.Duration(s.Backoff.Initial), Max: wire.Duration(s.Backoff.Max),
			Multiplier: s.Backoff.Multiplier, Jitter: s.Backoff.Jitter,
		},
		Lease: &lease,
	}
	if s.RateLimit != nil {
		out.RateLimit = &wire.RateLimit{PerSecond: s.RateLimit.PerSecond, Burst: s.RateLimit.Burst}
	}
	if s.Push != nil {
		// The secret is write-only: answers say only whether one is set.
		out.Push = &wire.Push{URL: s.Push.URL, Timeout: wire.Duration(s.Push.Timeout), Concurrency: s.Push.Concurrency,
			SecretSet: s.Push.SecretSet || s.Push.Secret != ""}
	}
	return out
}

// settingsFromWire converts PUT /v1/topics/{topic}; the engine validates
// ranges, the server only the shape (no negative numbers).
func settingsFromWire(in *wire.TopicSettings) (domain.TopicSettings, error) {
	var out domain.TopicSettings
	if in.MaxAttempts < 0 {
		return out, domain.Invalid("max_attempts", "must not be negative")
	}
	out.MaxAttempts = in.MaxAttempts
	if b := in.Backoff; b != nil {
		switch {
		case b.Initial < 0:
			return out, domain.Invalid("backoff.initial", "must not be negative")
		case b.Max < 0:
			return out, domain.Invalid("backoff.max", "must not be negative")
		case b.Multiplier < 0:
			return out, domain.Invalid("backoff.multiplier", "must not be negative")
		case b.Jitter < 0 || b.Jitter > 1:
			return out, domain.Invalid("backoff.jitter", "must be between 0 and 1")
		}
		out.Backoff = domain.Backoff{Initial: time.Duration(b.Initial), Max: time.Duration(b.Max), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	if in.Lease != nil {
		if *in.Lease < 0 {
			return out, domain.Invalid("lease", "must not be negative")
		}
		out.Lease = time.Duration(*in.Lease)
	}
	if rl := in.RateLimit; rl != nil {
		if rl.PerSecond <= 0 || rl.Burst < 0 {
			return out, domain.Invalid("rate_limit", "per_second must be positive and burst not negative")
		}
		out.RateLimit = &domain.RateLimit{PerSecond: rl.PerSecond, Burst: rl.Burst}
	}
	if p := in.Push; p != nil {
		if p.Timeout < 0 || p.Concurrency < 0 {
			return out, domain.Invalid("push", "timeout and concurrency must not be negative")
		}
		// secret_set is answer-only and ignored here, so a topic read,
		// changed and written back keeps its secret (the engine keeps a
		// stored secret when none is given).
		out.Push = &domain.PushSettings{URL: p.URL, Timeout: time.Duration(p.Timeout), Concurrency: p.Concurrency, Secret: p.Secret}
	}
	return out, nil
}

func topicToWire(t *domain.TopicInfo, now time.Time) wire.Topic {
	out := wire.Topic{
		Name: t.Name,
		Counts: wire.Counts{Scheduled: t.Counts.Scheduled, Ready: t.Counts.Ready,
			Inflight: t.Counts.Inflight, Dead: t.Counts.Dead},
		Settings: settingsToWire(t.Settings),
	}
	if !t.NextDue.IsZero() {
		nd := ms(t.NextDue)
		out.NextDue = &nd
	}
	if !t.OldestReady.IsZero() {
		age := max(now.Sub(t.OldestReady).Milliseconds(), 0)
		out.OldestReadyAgeMS = &age
	}
	return out
}
