// Package targets maps a topic's deliver settings to the broker Target
// that publishes them: one case per broker package.
package targets

import (
	"context"
	"fmt"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/kafka"
	"github.com/delayq/delayq/internal/deliver/natsjs"
	"github.com/delayq/delayq/internal/deliver/rabbitmq"
	"github.com/delayq/delayq/internal/deliver/redisstream"
	"github.com/delayq/delayq/internal/domain"
)

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
	case s.RabbitMQ != nil:
		r := s.RabbitMQ
		return rabbitmq.New(ctx, rabbitmq.Config{URL: r.URL, Exchange: r.Exchange, RoutingKey: r.RoutingKey,
			TLS: deliver.TLSOf(r.TLS), Timeout: s.Timeout})
	case s.NATS != nil:
		n := s.NATS
		return natsjs.New(ctx, natsjs.Config{URL: n.URL, Subject: n.Subject, User: n.User, Password: n.Password, Token: n.Token,
			TLS: deliver.TLSOf(n.TLS), Timeout: s.Timeout})
	}
	return nil, fmt.Errorf("topic %s: deliver settings name no target", topic)
}
