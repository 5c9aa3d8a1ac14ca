package engine

import "time"

// Observer receives engine events, for metrics. The engine never imports
// Prometheus; internal/metrics implements this. Methods are called from
// request and background goroutines and must be fast and concurrency-safe.
type Observer interface {
	// Sent counts accepted (non-duplicate) messages.
	Sent(topic string, n int)
	// Delivered is called once per message handed out by Lease, with its
	// release lateness: the time it was handed out minus its due time,
	// less the part the topic's rate limit held it back (reported by
	// Throttled). Early deliveries never happen; lateness is never negative.
	Delivered(topic string, lateness time.Duration)
	// Throttled is called once per message handed out by Lease while the
	// topic was throttled, just before Delivered, with the time its rate
	// limit held it back: from the later of its due time and the start of
	// the topic's current throttled period, to its release. A throttled
	// period starts when a lease gets fewer tokens than it asked for and
	// uses them all (or gets none), and ends with a lease that gets all it
	// asked for or leaves tokens unused. Delivered's lateness excludes
	// this time.
	Throttled(topic string, d time.Duration)
	// Acked counts acknowledgements.
	Acked(topic string, n int)
	// Nacked counts consumer-reported failures.
	Nacked(topic string, n int)
	// Expired counts leases that ran out (also failures).
	Expired(topic string, n int)
	// Died counts messages moved to the dead-letter list.
	Died(topic string, n int)
	// Cancelled counts cancels.
	Cancelled(topic string, n int)
	// StoreError counts storage failures seen by the engine, by operation.
	StoreError(op string)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Sent(string, int)                {}
func (NopObserver) Delivered(string, time.Duration) {}
func (NopObserver) Throttled(string, time.Duration) {}
func (NopObserver) Acked(string, int)               {}
func (NopObserver) Nacked(string, int)              {}
func (NopObserver) Expired(string, int)             {}
func (NopObserver) Died(string, int)                {}
func (NopObserver) Cancelled(string, int)           {}
func (NopObserver) StoreError(string)               {}
