package targets_test

import (
	"context"
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/deliver/kafka"
	"github.com/delayq/delayq/internal/deliver/redisstream"
	"github.com/delayq/delayq/internal/deliver/targets"
	"github.com/delayq/delayq/internal/domain"
)

func TestNewPicksTheTarget(t *testing.T) {
	ctx := context.Background()
	k, err := targets.New(ctx, "t", domain.DeliverSettings{Kafka: &domain.KafkaTarget{Brokers: []string{"127.0.0.1:1"}, Topic: "x"}, MaxInFlight: 4})
	if _, ok := k.(*kafka.Target); !ok || err != nil {
		t.Fatalf("kafka: %T %v", k, err)
	}
	_ = k.Close()
	r, err := targets.New(ctx, "t", domain.DeliverSettings{Redis: &domain.RedisTarget{Addr: "127.0.0.1:1", Stream: "x"}})
	if _, ok := r.(*redisstream.Target); !ok || err != nil {
		t.Fatalf("redis: %T %v", r, err)
	}
	_ = r.Close()
	if _, err := targets.New(ctx, "t", domain.DeliverSettings{Redis: &domain.RedisTarget{Addr: "127.0.0.1:1", Stream: "x", TLS: &domain.TLSSettings{CAPEM: "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----"}}}); err == nil {
		t.Fatal("an unparsable CA was accepted")
	}
	// RabbitMQ and NATS answer ErrUnsupported until their packages are
	// merged and their cases added to New; replace this loop then.
	for _, s := range []domain.DeliverSettings{{RabbitMQ: &domain.RabbitMQTarget{URL: "amqp://h:5672/"}}, {NATS: &domain.NATSTarget{URL: "nats://h:4222", Subject: "s"}}} {
		if _, err := targets.New(ctx, "t", s); !errors.Is(err, targets.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", s.Kind(), err)
		}
	}
}
