package metrics

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/engine"
)

// BenchmarkHandleEvent is the metrics' share of a message's path: a send,
// a delivery and an ack event of one topic among a few, and the HTTP
// request observations of the calls that carried them.
//
//	go test -run XXX -bench HandleEvent -benchmem ./internal/metrics
func BenchmarkHandleEvent(b *testing.B) {
	m := New()
	topics := []string{"orders", "webhooks", "emails", "reports"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		topic := topics[i%len(topics)]
		m.HandleEvent(engine.Event{Kind: engine.EventSent, Topic: topic, N: 1})
		m.HandleEvent(engine.Event{Kind: engine.EventDelivered, Topic: topic, Lateness: time.Duration(i%2000) * time.Microsecond})
		m.HandleEvent(engine.Event{Kind: engine.EventAcked, Topic: topic, N: 1})
		m.ObserveRequest("POST", "POST /v1/topics/{topic}/messages", 201, time.Millisecond)
		m.ObserveRequest("POST", "POST /v1/topics/{topic}/lease", 200, time.Millisecond)
	}
}
