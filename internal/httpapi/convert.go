package httpapi

import (
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// prefixed names err's field under prefix: a batch item's ("messages[3].").
func prefixed(prefix string, err error) error {
	if prefix == "" {
		return err
	}
	switch e := err.(type) {
	case *domain.InvalidError:
		return &domain.InvalidError{Field: prefix + e.Field, Reason: e.Reason}
	case *domain.SizeError:
		return &domain.SizeError{Field: prefix + e.Field, Size: e.Size, Limit: e.Limit}
	}
	return err
}

// checkSettingsShape refuses negative numbers in PUT /v1/topics/{topic};
// the engine checks the ranges.
func checkSettingsShape(in *wire.TopicSettings) error {
	if in.MaxAttempts < 0 {
		return domain.Invalid("max_attempts", "must not be negative")
	}
	if b := in.Backoff; b != nil {
		switch {
		case b.Initial != nil && *b.Initial < 0:
			return domain.Invalid("backoff.initial", "must not be negative")
		case b.Max < 0:
			return domain.Invalid("backoff.max", "must not be negative")
		case b.Multiplier < 0:
			return domain.Invalid("backoff.multiplier", "must not be negative")
		case b.Jitter != nil && (*b.Jitter < 0 || *b.Jitter > 1):
			return domain.Invalid("backoff.jitter", "must be between 0 and 1")
		}
	}
	if in.Lease != nil && *in.Lease < 0 {
		return domain.Invalid("lease", "must not be negative")
	}
	if rl := in.RateLimit; rl != nil && (rl.PerSecond <= 0 || rl.Burst < 0) {
		return domain.Invalid("rate_limit", "per_second must be positive and burst not negative")
	}
	if p := in.Push; p != nil && (p.Timeout < 0 || p.Concurrency < 0) {
		return domain.Invalid("push", "timeout and concurrency must not be negative")
	}
	if d := in.Deliver; d != nil {
		switch {
		case d.MaxInFlight < 0:
			return domain.Invalid("deliver.max_in_flight", "must not be negative")
		case d.TimeoutMS < 0:
			return domain.Invalid("deliver.timeout_ms", "must not be negative")
		case d.Redis != nil && d.Redis.MaxLen < 0:
			return domain.Invalid("deliver.redis.maxlen", "must not be negative")
		}
	}
	return nil
}
