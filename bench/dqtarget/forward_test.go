package dqtarget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestForwardToRedisStream runs the forward scenario, tiny, against a
// redis-server the test starts: every message confirmed once, none
// early, and the stream the run created is gone afterwards. A broker
// that is unreachable fails the run (nothing confirmed is never a pass).
func TestForwardToRedisStream(t *testing.T) {
	srv := redistest.Start(t)
	facs, skipped, err := ForwardFactories(bench.Brokers{Redis: srv.URL()}, 40)
	if err != nil || len(facs) != 1 || len(skipped) != 3 {
		t.Fatalf("factories %d, skipped %q, err %v", len(facs), skipped, err)
	}
	c := bench.Config{Scenario: bench.ScenarioForward, N: 300, Batch: 100, Concurrency: 2, Rate: 300, Duration: time.Second,
		Lead: 500 * time.Millisecond, Grace: 10 * time.Second, Durable: true}.Fill()
	reps := bench.Run(context.Background(), []bench.Config{c}, facs, 1, nil)
	tr := reps[0].Results[0]
	if tr.Error != "" {
		t.Fatal(tr.Error)
	}
	for _, k := range []string{"backlog_missing", "backlog_early", "backlog_duplicates", "early", "duplicates", "missing"} {
		if v := tr.Summary[k].Sum; v != 0 {
			t.Errorf("%s = %v", k, v)
		}
	}
	if got := tr.Summary["checked"].Sum; got != 300 {
		t.Errorf("paced: %v checked, want 300", got)
	}
	if v := tr.Summary["fwd_msgs_per_s"].Median; v <= 0 {
		t.Errorf("forwarding rate %v", v)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "delayq-bench-*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("streams left behind: %q %v", keys, err)
	}

	srv.Kill()
	reps = bench.Run(context.Background(), []bench.Config{c}, facs, 1, nil)
	if e := reps[0].Results[0].Error; !strings.Contains(e, "redis") {
		t.Errorf("broker down: error %q", e)
	}
}

// TestForwardToKafka runs the forward scenario, tiny, against kfake
// (franz-go's in-process Kafka; no Kafka is installed here): the topic
// is created, every message confirmed once, none early, and the topic
// deleted afterwards.
func TestForwardToKafka(t *testing.T) {
	cl, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	facs, _, err := ForwardFactories(bench.Brokers{Kafka: strings.Join(cl.ListenAddrs(), ",")}, 40)
	if err != nil || len(facs) != 1 {
		t.Fatalf("factories %d, err %v", len(facs), err)
	}
	c := bench.Config{Scenario: bench.ScenarioForward, N: 300, Batch: 100, Concurrency: 2, Rate: 300, Duration: time.Second,
		Lead: 500 * time.Millisecond, Grace: 10 * time.Second, Durable: true}.Fill()
	tr := bench.Run(context.Background(), []bench.Config{c}, facs, 1, nil)[0].Results[0]
	if tr.Error != "" {
		t.Fatal(tr.Error)
	}
	for _, k := range []string{"backlog_missing", "backlog_early", "backlog_duplicates", "early", "duplicates", "missing"} {
		if v := tr.Summary[k].Sum; v != 0 {
			t.Errorf("%s = %v", k, v)
		}
	}
	if got := tr.Summary["checked"].Sum; got != 300 {
		t.Errorf("paced: %v checked, want 300", got)
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(cl.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), adm)
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range md.Topics {
		if mt.Topic != nil && strings.HasPrefix(*mt.Topic, "delayq-bench-") {
			t.Errorf("topic %s left behind", *mt.Topic)
		}
	}
}

// TestForwardRabbitMQQueueTypes: --rabbitmq-queue makes one target per
// type and refuses an unknown type naming the flag.
func TestForwardRabbitMQQueueTypes(t *testing.T) {
	facs, _, err := ForwardFactories(bench.Brokers{RabbitMQ: "amqp://guest:guest@127.0.0.1:1/", RabbitMQQueue: "classic, quorum"}, 40)
	if err != nil || len(facs) != 2 || facs[0].Name != "rabbitmq-classic" || facs[1].Name != "rabbitmq-quorum" {
		t.Fatalf("factories %+v, err %v", facs, err)
	}
	if facs, _, err = ForwardFactories(bench.Brokers{RabbitMQ: "amqp://guest:guest@127.0.0.1:1/"}, 40); err != nil || len(facs) != 1 || facs[0].Name != "rabbitmq" {
		t.Fatalf("default: factories %+v, err %v", facs, err)
	}
	if _, _, err := ForwardFactories(bench.Brokers{RabbitMQ: "amqp://guest:guest@127.0.0.1:1/", RabbitMQQueue: "stream"}, 40); err == nil || !strings.Contains(err.Error(), "--rabbitmq-queue") {
		t.Fatalf("unknown queue type: err %v", err)
	}
}
