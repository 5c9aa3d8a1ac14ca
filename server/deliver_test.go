package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/server"
)

// TestDeliverIntoBrokers runs the server with one topic delivered into
// Kafka (kfake, franz-go's in-process cluster: no Kafka is installed
// here) and one into a Redis stream, all configured over HTTP:
//   - delayed messages appear in the brokers after their due time, never
//     before, and are acked in delayq;
//   - with Redis killed, its messages are retried with backoff while the
//     Kafka topic keeps delivering; once Redis is back every message is
//     there (lost 0);
//   - the metrics count what was published.
func TestDeliverIntoBrokers(t *testing.T) {
	ctx := context.Background()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	rs := redistest.Start(t)

	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := "http://" + ln.Addr().String()
	c, err := delayq.NewClient(base, delayq.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		hc.CloseIdleConnections()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	fast := delayq.Backoff{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond, Multiplier: 2}
	if _, err := c.SetTopicSettings(ctx, "k", delayq.TopicSettings{MaxAttempts: 1000, Backoff: fast,
		Deliver: &delayq.DeliverSettings{Kafka: &delayq.KafkaTarget{Brokers: kc.ListenAddrs(), Topic: "orders"}, Timeout: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetTopicSettings(ctx, "r", delayq.TopicSettings{MaxAttempts: 1000, Backoff: fast,
		Deliver: &delayq.DeliverSettings{Redis: &delayq.RedisTarget{Addr: rs.Addr(), Stream: "orders"}, Timeout: time.Second}}); err != nil {
		t.Fatal(err)
	}

	send := func(topic, prefix string, n int, delay time.Duration) map[string]time.Time {
		due := map[string]time.Time{}
		for i := range n {
			m, err := c.Send(ctx, topic, delayq.NewSendRequest([]byte("p"), delayq.WithID(prefix+strconv.Itoa(i)), delayq.After(delay)))
			if err != nil {
				t.Fatal(err)
			}
			due[m.ID] = m.DeliverAt
		}
		return due
	}
	kafkaSeen := &kafkaReader{t: t, addrs: kc.ListenAddrs(), at: map[string]time.Time{}}
	defer kafkaSeen.close()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), DisableIdentity: true})
	defer rdb.Close()
	redisSeen := func() map[string]time.Time {
		es, err := rdb.XRange(ctx, "orders", "-", "+").Result()
		if err != nil {
			return nil
		}
		out := map[string]time.Time{}
		for _, e := range es {
			ms, _ := strconv.ParseInt(strings.SplitN(e.ID, "-", 2)[0], 10, 64)
			if _, dup := out[e.Values["id"].(string)]; !dup {
				out[e.Values["id"].(string)] = time.UnixMilli(ms)
			}
		}
		return out
	}

	// 1. Due-time delivery.
	kDue := send("k", "k-", 30, 1500*time.Millisecond)
	rDue := send("r", "r-", 30, 1500*time.Millisecond)
	time.Sleep(700 * time.Millisecond)
	if n, m := len(kafkaSeen.poll()), len(redisSeen()); n != 0 || m != 0 {
		t.Fatalf("before the due time: %d in Kafka, %d in Redis", n, m)
	}
	waitUntil(t, "every message in both brokers", 20*time.Second, func() bool {
		return len(kafkaSeen.poll()) == 30 && len(redisSeen()) == 30
	})
	checkAfterDue(t, "kafka", kafkaSeen.poll(), kDue)
	checkAfterDue(t, "redis", redisSeen(), rDue)
	waitUntil(t, "every message acked", 10*time.Second, func() bool {
		for _, tp := range []string{"k", "r"} {
			ti, err := c.Topic(ctx, tp)
			if err != nil || ti.Counts.Scheduled+ti.Counts.Ready+ti.Counts.Inflight+ti.Counts.Dead != 0 {
				return false
			}
		}
		return true
	})
	if m, err := c.Get(ctx, "k", "k-0"); err != nil || m.State != delayq.StateAcked {
		t.Fatalf("k-0: %+v %v, want acked", m, err)
	}

	// 2. Redis down: retried with backoff; Kafka unaffected; lost 0.
	rs.Kill()
	rDown := send("r", "down-", 10, 0)
	waitUntil(t, "retries against the killed Redis", 10*time.Second, func() bool {
		m, err := c.Get(ctx, "r", "down-0")
		return err == nil && m.Failures >= 2 && strings.HasPrefix(m.LastError, "deliver: redis")
	})
	send("k", "while-redis-down-", 10, 0)
	waitUntil(t, "Kafka delivering while Redis is down", 10*time.Second, func() bool { return len(kafkaSeen.poll()) == 40 })
	rs.Restart()
	waitUntil(t, "the Redis backlog after restart", 20*time.Second, func() bool {
		got := redisSeen()
		for id := range rDown {
			if _, ok := got[id]; !ok {
				return false
			}
		}
		return true
	})
	for id := range rDue { // the stream survived the restart (AOF)
		if _, ok := redisSeen()[id]; !ok {
			t.Errorf("%s missing after the restart", id)
		}
	}

	// 3. Metrics.
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`delayq_deliver_published_total{target="kafka",topic="k"} 40`, `delayq_deliver_failed_total{target="redis",topic="r"}`, `delayq_deliver_confirm_seconds_count{target="redis",topic="r"}`, `delayq_deliver_in_flight{target="kafka",topic="k"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func checkAfterDue(t *testing.T, what string, got, due map[string]time.Time) {
	t.Helper()
	for id, d := range due {
		at, ok := got[id]
		switch {
		case !ok:
			t.Errorf("%s: %s lost", what, id)
		case at.Before(d.Truncate(time.Millisecond)):
			t.Errorf("%s: %s published at %s, before its due time %s", what, id, at, d)
		}
	}
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kafkaReader consumes the Kafka topic, keeping each message id's first
// record time (the producer's timestamp).
type kafkaReader struct {
	t     *testing.T
	addrs []string
	once  sync.Once
	cl    *kgo.Client
	at    map[string]time.Time
}

func (r *kafkaReader) poll() map[string]time.Time {
	r.once.Do(func() {
		var err error
		r.cl, err = kgo.NewClient(kgo.SeedBrokers(r.addrs...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			r.t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r.cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
		if _, dup := r.at[string(rec.Key)]; !dup {
			r.at[string(rec.Key)] = rec.Timestamp
		}
	})
	return r.at
}

func (r *kafkaReader) close() {
	if r.cl != nil {
		r.cl.Close()
	}
}

// TestDeliverKafkaNeverConfirms: a Kafka broker that swallows produce
// requests confirms nothing: nothing is acked, at most max_in_flight
// messages are in flight at once, and each is offered again (failures
// grow); once the broker answers again, every message arrives.
func TestDeliverKafkaNeverConfirms(t *testing.T) {
	ctx := context.Background()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	var mu sync.Mutex
	swallow, swallowed := true, 0
	kc.ControlKey(0 /* Produce */, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if swallow {
			swallowed++
		}
		return nil, nil, swallow // handled without an answer: the client waits
	})
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	q := srv.Queue()
	if _, err := q.SetTopicSettings(ctx, "k", delayq.TopicSettings{MaxAttempts: 1000,
		Backoff: delayq.Backoff{Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond, Multiplier: 2},
		Deliver: &delayq.DeliverSettings{Kafka: &delayq.KafkaTarget{Brokers: kc.ListenAddrs(), Topic: "orders"}, MaxInFlight: 8, Timeout: time.Second}}); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := q.Send(ctx, "k", delayq.NewSendRequest([]byte("p"), delayq.WithID("k-"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().Add(4 * time.Second)
	maxInflight := int64(0)
	for time.Now().Before(until) {
		ti, err := q.Topic(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		c := ti.Counts
		maxInflight = max(maxInflight, c.Inflight)
		if c.Scheduled+c.Ready+c.Inflight != 40 {
			t.Fatalf("counts %+v: something was acked although the broker confirmed nothing", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if maxInflight > 8 || maxInflight == 0 {
		t.Fatalf("at most %d in flight, want 1..8", maxInflight)
	}
	m, err := q.Get(ctx, "k", "k-0")
	if err != nil {
		t.Fatal(err)
	}
	if m.Failures == 0 || !strings.Contains(m.LastError, "did not confirm") {
		t.Fatalf("k-0: failures %d, last error %q", m.Failures, m.LastError)
	}
	mu.Lock()
	swallow = false
	n := swallowed
	mu.Unlock()
	if n == 0 {
		t.Fatal("no produce request reached the broker")
	}
	r := &kafkaReader{t: t, addrs: kc.ListenAddrs(), at: map[string]time.Time{}}
	defer r.close()
	waitUntil(t, "every message once the broker answers", 60*time.Second, func() bool { return len(r.poll()) == 40 })
	waitUntil(t, "every message acked", 10*time.Second, func() bool {
		ti, err := q.Topic(ctx, "k")
		return err == nil && ti.Counts.Scheduled+ti.Counts.Ready+ti.Counts.Inflight+ti.Counts.Dead == 0
	})
}
