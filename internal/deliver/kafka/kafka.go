// Package kafka is the Kafka target of broker delivery: an idempotent
// franz-go producer with acks=all, so a confirmed record is on every
// in-sync replica and the producer's own retries never duplicate it.
//
// Each message becomes one record: key = the message id (or the value of
// Config.KeyHeader), value = the payload, headers = the message's
// headers plus Delayq-Message-Id, Delayq-Attempt, Delayq-Topic and
// Delayq-Priority. Records
// with the same key go to the same partition, in order.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/domain"
)

// Config configures a Target.
type Config struct {
	Target domain.KafkaTarget
	// MaxBuffered bounds the records the client buffers (a down broker
	// never grows memory past it); default 1024.
	MaxBuffered int
	// DeliveryTimeout fails records not confirmed by then (default 30 s);
	// Publish itself returns at its ctx's end.
	DeliveryTimeout time.Duration
	// RequestTimeout bounds a produce request on the wire (with as much
	// again for the network), so a broker that never answers has its
	// connection cut and the records retried on a new one; default 10 s.
	RequestTimeout time.Duration
	// Extra options, for tests.
	Opts []kgo.Opt
}

// Target produces to one Kafka topic.
type Target struct {
	cl        *kgo.Client
	keyHeader string
}

var _ deliver.Target = (*Target)(nil)

// New makes a Target. It does not connect: the first Publish does.
func New(_ context.Context, cfg Config) (*Target, error) {
	k := cfg.Target
	if len(k.Brokers) == 0 || k.Topic == "" {
		return nil, errors.New("kafka: brokers and topic are required")
	}
	maxBuf := cfg.MaxBuffered
	if maxBuf <= 0 {
		maxBuf = 1024
	}
	dt := cfg.DeliveryTimeout
	if dt <= 0 {
		dt = 30 * time.Second
	}
	rt := cfg.RequestTimeout
	if rt <= 0 {
		rt = 10 * time.Second
	}
	opts := []kgo.Opt{
		kgo.ProduceRequestTimeout(rt),
		kgo.RequestTimeoutOverhead(rt),
		kgo.SeedBrokers(k.Brokers...),
		kgo.DefaultProduceTopic(k.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotence is franz-go's default and needs it
		kgo.MaxBufferedRecords(maxBuf),
		kgo.RecordDeliveryTimeout(dt),
		kgo.ProducerLinger(0),
	}
	tc, err := deliver.TLSOf(k.TLS).Config()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s := k.SASL; s != nil {
		m, err := mechanism(s)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	opts = append(opts, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &Target{cl: cl, keyHeader: k.KeyHeader}, nil
}

func mechanism(s *domain.KafkaSASL) (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "PLAIN":
		return plain.Auth{User: s.User, Pass: s.Password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("kafka: unknown SASL mechanism %q", s.Mechanism)
}

// Record is the record m becomes.
func (t *Target) Record(m deliver.Message) *kgo.Record {
	key := m.ID
	if t.keyHeader != "" {
		key = m.Headers[t.keyHeader]
	}
	h := deliver.Headers(m)
	r := &kgo.Record{Key: []byte(key), Value: m.Payload, Headers: make([]kgo.RecordHeader, 0, len(h))}
	for k, v := range h {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

// Publish produces msgs and waits for their acks (or ctx's end: records
// not confirmed by then fail with ctx's error, and may still be written
// later — delivery is at least once).
func (t *Target) Publish(ctx context.Context, msgs []deliver.Message) []error {
	var (
		mu        sync.Mutex
		errs      = make([]error, len(msgs))
		settled   = make([]bool, len(msgs))
		pending   = len(msgs)
		abandoned bool
		done      = make(chan struct{})
	)
	for i, m := range msgs {
		t.cl.Produce(ctx, t.Record(m), func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if abandoned {
				return
			}
			errs[i], settled[i] = err, true
			pending--
			if pending == 0 {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	out := make([]error, len(errs))
	for i, err := range errs {
		if out[i] = err; !settled[i] {
			out[i] = fmt.Errorf("kafka: not confirmed: %w", ctx.Err())
		}
	}
	return out
}

// Close flushes nothing (unconfirmed records are the caller's to retry)
// and closes the client.
func (t *Target) Close() error {
	t.cl.Close()
	return nil
}
