package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/kafka"
	"github.com/delayq/delayq/internal/domain"
)

// Kafka is tested against kfake, franz-go's in-process Kafka: no Kafka
// package is installed on the machines this project runs on.
func cluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newTarget(t *testing.T, c *kfake.Cluster, keyHeader string) *kafka.Target {
	t.Helper()
	tg, err := kafka.New(context.Background(), kafka.Config{Target: domain.KafkaTarget{Brokers: c.ListenAddrs(), Topic: "orders", KeyHeader: keyHeader}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tg.Close() })
	return tg
}

// consume reads n records of the topic from the start.
func consume(t *testing.T, c *kfake.Cluster, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records, want %d", len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func msgs(n int) []deliver.Message {
	out := make([]deliver.Message, n)
	for i := range out {
		id := "m-" + strconv.Itoa(i)
		out[i] = deliver.Message{Topic: "dq", ID: id, Payload: []byte("payload " + id), Attempt: 2, Priority: 9,
			Headers: map[string]string{"tenant": "t" + strconv.Itoa(i%2)}, DueAt: time.Now()}
	}
	return out
}

func TestPublishConfirmsAndCarriesIdentity(t *testing.T) {
	c := cluster(t)
	tg := newTarget(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := msgs(20)
	for i, err := range tg.Publish(ctx, in) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := consume(t, c, len(in))
	seen := map[string]bool{}
	for _, r := range got {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		id := string(r.Key)
		if h[deliver.HeaderID] != id || h[deliver.HeaderAttempt] != "2" || h[deliver.HeaderTopic] != "dq" || h[deliver.HeaderPriority] != "9" || h["tenant"] == "" {
			t.Errorf("record key %q headers %v", id, h)
		}
		if string(r.Value) != "payload "+id {
			t.Errorf("record %s value %q", id, r.Value)
		}
		seen[id] = true
	}
	if len(seen) != len(in) {
		t.Fatalf("%d distinct records, want %d", len(seen), len(in))
	}
}

func TestKeyHeader(t *testing.T) {
	c := cluster(t)
	tg := newTarget(t, c, "tenant")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, err := range tg.Publish(ctx, msgs(4)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range consume(t, c, 4) {
		if k := string(r.Key); k != "t0" && k != "t1" {
			t.Errorf("key %q, want the tenant header's value", k)
		}
	}
}

// TestUnconfirmed: a broker that swallows produce requests confirms
// nothing; Publish returns at its deadline with an error for each.
func TestUnconfirmed(t *testing.T) {
	c := cluster(t)
	var swallowed atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		swallowed.Add(1)
		return nil, nil, true // no answer: the client waits
	})
	tg := newTarget(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	errs := tg.Publish(ctx, msgs(5))
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Publish took %s past its 2s deadline", d)
	}
	for i, err := range errs {
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %d: %v, want a deadline error", i, err)
		}
	}
	if swallowed.Load() == 0 {
		t.Fatal("no produce request reached the broker")
	}
}

// TestBrokerDown: nothing listens; every message fails by the deadline.
func TestBrokerDown(t *testing.T) {
	tg, err := kafka.New(context.Background(), kafka.Config{Target: domain.KafkaTarget{Brokers: []string{"127.0.0.1:1"}, Topic: "orders"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for i, err := range tg.Publish(ctx, msgs(3)) {
		if err == nil {
			t.Errorf("message %d confirmed by no broker", i)
		}
	}
}

func TestSASLPlain(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.EnableSASL(), kfake.Superuser("PLAIN", "admin", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		pass string
		ok   bool
	}{{"s3cret", true}, {"wrong", false}} {
		tg, err := kafka.New(context.Background(), kafka.Config{Target: domain.KafkaTarget{Brokers: c.ListenAddrs(), Topic: "orders",
			SASL: &domain.KafkaSASL{Mechanism: "PLAIN", User: "admin", Password: tc.pass}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		errs := tg.Publish(ctx, msgs(1))
		cancel()
		tg.Close()
		if (errs[0] == nil) != tc.ok {
			t.Errorf("password %q: %v", tc.pass, errs[0])
		}
	}
}
