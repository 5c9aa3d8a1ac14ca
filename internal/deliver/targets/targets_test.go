package targets_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
	// RabbitMQ and NATS connect in New (their packages test them against
	// real brokers): with nothing listening, New fails naming the broker,
	// never the URL's password.
	for _, s := range []domain.DeliverSettings{
		{RabbitMQ: &domain.RabbitMQTarget{URL: "amqp://u:pw-s3cret@127.0.0.1:1/", RoutingKey: "q"}, Timeout: time.Second},
		{NATS: &domain.NATSTarget{URL: "nats://127.0.0.1:1", Subject: "s", User: "u", Password: "pw-s3cret"}, Timeout: time.Second},
	} {
		_, err := targets.New(ctx, "t", s)
		if err == nil || strings.Contains(err.Error(), "pw-s3cret") {
			t.Errorf("%s with nothing listening: %v", s.Kind(), err)
		}
	}
}
