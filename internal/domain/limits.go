package domain

import (
	"strconv"
	"time"
)

// DefaultMaxDelay is the default of Limits.MaxDelay.
const DefaultMaxDelay = 10 * 365 * 24 * time.Hour

// Limits are a server's configurable bounds on what a message carries and
// how far ahead it may be due. The engine is configured with them and is
// where they are enforced; the HTTP API reads them from the engine (to cap
// body sizes, and to check a batch's items before any is sent).
type Limits struct {
	// MaxPayload is the payload limit in bytes; 0: DefaultMaxPayload.
	MaxPayload int
	// MaxDelay is the furthest ahead a message may be due; 0: DefaultMaxDelay.
	MaxDelay time.Duration
}

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxPayload == 0 {
		l.MaxPayload = DefaultMaxPayload
	}
	if l.MaxDelay == 0 {
		l.MaxDelay = DefaultMaxDelay
	}
	return l
}

// CheckPayload refuses a payload over MaxPayload with a *SizeError.
func (l Limits) CheckPayload(p []byte) error {
	if len(p) > l.MaxPayload {
		return &SizeError{Field: "payload", Size: len(p), Limit: l.MaxPayload}
	}
	return nil
}

// CheckDelay checks a relative delay: not negative, at most MaxDelay.
// field names it in the error ("delay").
func (l Limits) CheckDelay(d time.Duration, field string) error {
	if d < 0 {
		return Invalid(field, "must not be negative, got %s", d)
	}
	if d > l.MaxDelay {
		return Invalid(field, "%s is beyond the maximum delay of %s", d, l.MaxDelay)
	}
	return nil
}

// CheckWhen checks a due time as far as it can without a clock: at most
// one of Delay and DeliverAt, and Delay within [0, MaxDelay]. (How far
// ahead DeliverAt may be depends on the clock: the engine checks it.)
func (l Limits) CheckWhen(w When) error {
	if w.Delay != 0 && !w.DeliverAt.IsZero() {
		return Invalid("delay", "give either a delay or deliver_at, not both")
	}
	return l.CheckDelay(w.Delay, "delay")
}

// CheckSend applies the rules of a send that need neither a clock nor the
// topic's settings: a valid id when one is given, the payload limit, the
// header rules, the priority's range and CheckWhen. The engine applies it to every send, then
// the rules that do (deliver_at bounds, max_attempts).
func (l Limits) CheckSend(r SendRequest) error {
	if r.ID != "" {
		if err := ValidateID(r.ID); err != nil {
			return err
		}
	}
	if err := l.CheckPayload(r.Payload); err != nil {
		return err
	}
	if err := ValidateHeaders(r.Headers); err != nil {
		return err
	}
	if err := CheckPriority(r.Priority); err != nil {
		return err
	}
	return l.CheckWhen(r.When)
}

// MaxPriority is the largest message priority (the least urgent).
const MaxPriority = 255

// CheckPriority rejects a priority outside 0..MaxPriority.
func CheckPriority(p int) error {
	if p < 0 || p > MaxPriority {
		return Invalid("priority", "must be an integer from 0 to %d (lower is leased first; 0, the default, is the most urgent), not %d", MaxPriority, p)
	}
	return nil
}

// SizeError is a value over a size limit: it matches ErrTooLarge and names
// the field.
type SizeError struct {
	Field       string
	Size, Limit int
}

func (e *SizeError) Error() string {
	return ErrTooLarge.Error() + ": " + e.Field + " is " + strconv.Itoa(e.Size) + " bytes, the limit is " + strconv.Itoa(e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *SizeError) Is(target error) bool { return target == ErrTooLarge }
