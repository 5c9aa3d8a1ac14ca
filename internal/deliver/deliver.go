// Package deliver publishes a topic's due messages into a broker the
// user already runs (Kafka, RabbitMQ, NATS JetStream, Redis Streams)
// instead of leaving them to be leased or pushed to a webhook.
//
// A message counts as delivered only once the broker confirmed it; a
// refused or unconfirmed publish is retried with the topic's backoff and
// ends in dead letters like a failed webhook. Delivery is at least once;
// every target carries the delayq message id where the broker can dedup
// by it.
package deliver

import (
	"context"
	"time"
)

// Message is one due message handed to a Target.
type Message struct {
	Topic   string
	ID      string
	Payload []byte
	Headers map[string]string
	Attempt int
	// Priority is the message's priority, carried as a header (0 is the
	// most urgent).
	Priority int
	DueAt    time.Time
}

// Target publishes to one broker destination. Implementations are safe
// for concurrent use.
type Target interface {
	// Publish publishes msgs and waits for the broker's confirmation of
	// each. It returns one error per message: nil when the broker
	// confirmed msgs[i], else why it did not (refused, not confirmed
	// before ctx ended, connection lost). Publishing a batch is expected
	// to be pipelined (one round of confirms for the batch, not one per
	// message).
	Publish(ctx context.Context, msgs []Message) []error
	// Close releases the connection(s); Publish after Close fails.
	Close() error
}
