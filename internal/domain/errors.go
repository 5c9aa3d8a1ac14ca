package domain

import (
	"errors"
	"fmt"
)

// Sentinel errors shared by every Queue implementation (engines and the
// HTTP client), so callers test them with errors.Is whatever the transport.
var (
	// ErrNotFound: no such message, topic or dead letter.
	ErrNotFound = errors.New("delayq: not found")
	// ErrConflict: the message is in a state that forbids the operation,
	// or the receipt is stale (the lease expired and was handed out again).
	ErrConflict = errors.New("delayq: conflict")
	// ErrInvalid: the request is malformed; see InvalidError for the field.
	ErrInvalid = errors.New("delayq: invalid request")
	// ErrTooLarge: the payload or request exceeds a configured limit.
	ErrTooLarge = errors.New("delayq: too large")
	// ErrUnavailable: the engine cannot serve the request now (storage
	// failure, Redis down, shutting down); retrying later may succeed.
	ErrUnavailable = errors.New("delayq: unavailable")
	// ErrRateLimited: too many requests.
	ErrRateLimited = errors.New("delayq: rate limited")
	// ErrUnauthorized: no or unknown credentials.
	ErrUnauthorized = errors.New("delayq: unauthorized")
	// ErrForbidden: the credentials lack the scope for this operation.
	ErrForbidden = errors.New("delayq: forbidden")
)

// InvalidError names the field that is wrong. It matches ErrInvalid.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return "invalid request: " + e.Reason
	}
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an *InvalidError for field.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
