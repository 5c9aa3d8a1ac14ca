package dashboard

import (
	"time"

	"github.com/delayq/delayq/internal/engine"
)

// Tee returns an engine.Observer that forwards every event to each of obs
// in order (nil entries are skipped). The engine takes one Observer; chain
// the Prometheus metrics and the dashboard's Recorder with it:
//
//	engine.Config{Observer: dashboard.Tee(metrics, recorder)}
//
// The result is as fast and concurrency-safe as its parts.
func Tee(obs ...engine.Observer) engine.Observer {
	var t tee
	for _, o := range obs {
		if o != nil {
			t = append(t, o)
		}
	}
	if len(t) == 1 {
		return t[0]
	}
	return t
}

type tee []engine.Observer

func (t tee) Sent(topic string, n int) {
	for _, o := range t {
		o.Sent(topic, n)
	}
}

func (t tee) Delivered(topic string, lateness time.Duration) {
	for _, o := range t {
		o.Delivered(topic, lateness)
	}
}

func (t tee) Throttled(topic string, d time.Duration) {
	for _, o := range t {
		o.Throttled(topic, d)
	}
}

func (t tee) Acked(topic string, n int) {
	for _, o := range t {
		o.Acked(topic, n)
	}
}

func (t tee) Nacked(topic string, n int) {
	for _, o := range t {
		o.Nacked(topic, n)
	}
}

func (t tee) Expired(topic string, n int) {
	for _, o := range t {
		o.Expired(topic, n)
	}
}

func (t tee) Died(topic string, n int) {
	for _, o := range t {
		o.Died(topic, n)
	}
}

func (t tee) Cancelled(topic string, n int) {
	for _, o := range t {
		o.Cancelled(topic, n)
	}
}

func (t tee) StoreError(op string) {
	for _, o := range t {
		o.StoreError(op)
	}
}
