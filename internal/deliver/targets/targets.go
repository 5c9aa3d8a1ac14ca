// Package targets maps a topic's deliver settings to the broker Target
// that publishes them: one case per broker package.
package targets

import (
	"context"
	"errors"
	"fmt"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/kafka"
	"github.com/delayq/delayq/internal/deliver/redisstream"
	"github.com/delayq/delayq/internal/domain"
)

// ErrUnsupported is answered for a target kind this build has no
// package for.
var ErrUnsupported = errors.New("deliver target unsupported in this build")

// New makes the Target of s (a deliver.Builder). topic is the delayq
// topic, for errors.
func New(ctx context.Context, topic string, s domain.DeliverSettings) (deliver.Target, error) {
	switch {
	case s.Kafka != nil:
		// The client buffers at most what a topic may have in flight,
		// twice (the records of a publish that timed out may still be
		// buffered while the next batch is produced).
		return kafka.New(ctx, kafka.Config{Target: *s.Kafka, MaxBuffered: 2 * max(s.MaxInFlight, 1),
			DeliveryTimeout: max(s.Timeout, domain.DefaultDeliverTimeout), RequestTimeout: s.Timeout})
	case s.Redis != nil:
		return redisstream.New(ctx, redisstream.Config{Target: *s.Redis})

	// --- RabbitMQ and NATS JetStream: the lead adds the cases for
	// internal/deliver/rabbitmq and internal/deliver/natsjs here, e.g.
	//	return rabbitmq.New(ctx, rabbitmq.Config{…from *s.RabbitMQ…})
	case s.RabbitMQ != nil:
		return nil, fmt.Errorf("topic %s: rabbitmq: %w", topic, ErrUnsupported)
	case s.NATS != nil:
		return nil, fmt.Errorf("topic %s: nats: %w", topic, ErrUnsupported)
	}
	return nil, fmt.Errorf("topic %s: deliver settings name no target", topic)
}
