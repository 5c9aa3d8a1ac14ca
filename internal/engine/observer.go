package engine

import "time"

// Observer receives engine events, for metrics. The engine never imports
// Prometheus; internal/metrics implements this. Methods are called from
// request and background goroutines and must be fast and concurrency-safe.
type Observer interface {
	// Sent counts accepted (non-duplicate) messages.
	Sent(topic string, n int)
	// Delivered is called once per message handed out by Lease, with its
	// release lateness: the time it was handed out minus its due time.
	// Early deliveries never happen; lateness is never negative.
	Delivered(topic string, lateness time.Duration)
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
func (NopObserver) Acked(string, int)               {}
func (NopObserver) Nacked(string, int)              {}
func (NopObserver) Expired(string, int)             {}
func (NopObserver) Died(string, int)                {}
func (NopObserver) Cancelled(string, int)           {}
func (NopObserver) StoreError(string)               {}
