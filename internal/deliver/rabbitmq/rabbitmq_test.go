package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/rabbitmq"
)

var broker *rabbitServer

func TestMain(m *testing.M) {
	var err error
	broker, err = startRabbit()
	if err != nil {
		// Fail, not skip: these tests are the only check of the target.
		fmt.Fprintf(os.Stderr, "rabbitmq tests need a RabbitMQ node and could not start one: %v\n", err)
		if broker != nil {
			broker.stop()
		}
		os.Exit(1)
	}
	code := m.Run()
	broker.stop()
	os.Exit(code)
}

var seq atomic.Int64

func unique(prefix string) string { return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1)) }

// admin opens a plain channel for declaring and consuming in tests.
func admin(t testing.TB) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(broker.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// boundQueue declares a direct exchange and a queue bound to it by key.
func boundQueue(t testing.TB, ch *amqp.Channel, args amqp.Table) (exchange, key, queue string) {
	t.Helper()
	exchange, key, queue = unique("ex"), unique("key"), unique("q")
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, true, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return exchange, key, queue
}

func newTarget(t testing.TB, cfg rabbitmq.Config) *rabbitmq.Target {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = broker.url()
	}
	tg, err := rabbitmq.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

func batch(prefix string, n, size int) []deliver.Message {
	msgs := make([]deliver.Message, n)
	for i := range msgs {
		msgs[i] = deliver.Message{
			Topic:    "orders",
			ID:       fmt.Sprintf("%s-%d", prefix, i),
			Payload:  bytes.Repeat([]byte{byte('a' + i%26)}, size),
			Headers:  map[string]string{"trace": fmt.Sprintf("t%d", i)},
			Attempt:  i%3 + 1,
			Priority: i % 5,
			DueAt:    time.Now(),
		}
	}
	return msgs
}

// drain gets every message now in queue.
func drain(t *testing.T, ch *amqp.Channel, queue string) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		got = append(got, d)
	}
}

func TestPublishConsume(t *testing.T) {
	ch := admin(t)
	exchange, key, queue := boundQueue(t, ch, nil)
	tg := newTarget(t, rabbitmq.Config{Exchange: exchange, RoutingKey: key})

	msgs := batch("m", 50, 100)
	msgs[0].Payload = nil // an empty payload is a message too
	for i, err := range tg.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := drain(t, ch, queue)
	if len(got) != len(msgs) {
		t.Fatalf("consumed %d messages, want %d", len(got), len(msgs))
	}
	byID := map[string]amqp.Delivery{}
	for _, d := range got {
		if _, dup := byID[d.MessageId]; dup {
			t.Fatalf("message %q consumed twice", d.MessageId)
		}
		byID[d.MessageId] = d
	}
	for _, m := range msgs {
		d, ok := byID[m.ID]
		if !ok {
			t.Fatalf("message %q not consumed", m.ID)
		}
		if !bytes.Equal(d.Body, m.Payload) {
			t.Errorf("%s: body %q, want %q", m.ID, d.Body, m.Payload)
		}
		if d.DeliveryMode != amqp.Persistent || d.ContentType != "application/octet-stream" {
			t.Errorf("%s: delivery mode %d content type %q", m.ID, d.DeliveryMode, d.ContentType)
		}
		if d.Headers["x-delayq-topic"] != "orders" || d.Headers["x-delayq-attempt"] != int64(m.Attempt) ||
			d.Headers["x-delayq-priority"] != int64(m.Priority) ||
			d.Headers["trace"] != m.Headers["trace"] {
			t.Errorf("%s: headers %v", m.ID, d.Headers)
		}
	}
}

func TestPublishConcurrent(t *testing.T) {
	ch := admin(t)
	exchange, key, queue := boundQueue(t, ch, nil)
	tg := newTarget(t, rabbitmq.Config{Exchange: exchange, RoutingKey: key})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < 5; b++ {
				for i, err := range tg.Publish(context.Background(), batch(fmt.Sprintf("g%d-b%d", g, b), 20, 10)) {
					if err != nil {
						t.Errorf("goroutine %d batch %d message %d: %v", g, b, i, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	got := drain(t, ch, queue)
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d.MessageId] {
			t.Fatalf("message %q twice", d.MessageId)
		}
		seen[d.MessageId] = true
	}
	if len(seen) != 4*5*20 {
		t.Fatalf("consumed %d distinct messages, want %d", len(seen), 4*5*20)
	}
}

func TestUnroutableFails(t *testing.T) {
	ch := admin(t)
	exchange, _, queue := boundQueue(t, ch, nil)
	// Nothing is bound with this key: mandatory publishes come back.
	tg := newTarget(t, rabbitmq.Config{Exchange: exchange, RoutingKey: "nobody-listens"})
	// More returns than the target's return buffer holds.
	errs := tg.Publish(context.Background(), batch("u", 1000, 10))
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "unroutable") || !strings.Contains(err.Error(), fmt.Sprintf("u-%d", i)) {
			t.Fatalf("message %d: err = %v, want unroutable naming it", i, err)
		}
	}
	if got := drain(t, ch, queue); len(got) != 0 {
		t.Fatalf("%d messages arrived", len(got))
	}
}

func TestNackedFails(t *testing.T) {
	ch := admin(t)
	exchange, key, queue := boundQueue(t, ch, amqp.Table{"x-max-length": int32(3), "x-overflow": "reject-publish"})
	tg := newTarget(t, rabbitmq.Config{Exchange: exchange, RoutingKey: key})
	msgs := batch("n", 6, 10)
	errs := tg.Publish(context.Background(), msgs)
	for i, err := range errs {
		if i < 3 && err != nil {
			t.Errorf("message %d: %v, want confirmed (queue has room)", i, err)
		}
		if i >= 3 && (err == nil || !strings.Contains(err.Error(), "nacked")) {
			t.Errorf("message %d: err = %v, want nacked", i, err)
		}
	}
	got := drain(t, ch, queue)
	if len(got) != 3 {
		t.Fatalf("queue holds %d messages, want 3", len(got))
	}
	for i, d := range got {
		if d.MessageId != msgs[i].ID {
			t.Errorf("queued %q at %d, want %q", d.MessageId, i, msgs[i].ID)
		}
	}
	// Room again: the same target confirms the refused ones now.
	for i, err := range tg.Publish(context.Background(), msgs[3:]) {
		if err != nil {
			t.Errorf("retry of message %d: %v", i+3, err)
		}
	}
}

func TestMissingExchange(t *testing.T) {
	_, err := rabbitmq.New(context.Background(), rabbitmq.Config{URL: broker.url(), Exchange: "no-such-exchange"})
	if err == nil || !strings.Contains(err.Error(), "no-such-exchange") {
		t.Fatalf("err = %v, want one naming the exchange", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  rabbitmq.Config
		want string
	}{
		{rabbitmq.Config{}, "url"},
		{rabbitmq.Config{URL: "http://x"}, "url"},
		{rabbitmq.Config{URL: broker.url(), Timeout: -1}, "timeout"},
		{rabbitmq.Config{URL: broker.url(), TLS: &deliver.TLSConfig{}}, "amqps"},
		{rabbitmq.Config{URL: "amqps://h/", TLS: &deliver.TLSConfig{CAPEM: "junk"}}, "ca_pem"},
	} {
		_, err := rabbitmq.New(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): err = %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
}

func TestErrorsHideThePassword(t *testing.T) {
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{
		fmt.Sprintf("amqp://guest:Sekr1tPw@127.0.0.1:%d/", ports[0]),    // nothing listens
		fmt.Sprintf("amqp://guest:Sekr1tPw@127.0.0.1:%d/", broker.port), // wrong password
	} {
		_, err := rabbitmq.New(context.Background(), rabbitmq.Config{URL: url, Timeout: 5 * time.Second})
		if err == nil {
			t.Fatalf("New(%s) succeeded", url)
		}
		if strings.Contains(err.Error(), "Sekr1tPw") {
			t.Fatalf("error shows the password: %v", err)
		}
		t.Logf("%v", err)
	}
}

func TestTLS(t *testing.T) {
	ch := admin(t)
	queue := unique("tls")
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("amqps://guest:guest@localhost:%d/", broker.tlsPort)
	for _, tc := range []struct {
		tls  *deliver.TLSConfig
		want string // "" for success, else part of New's error
	}{
		{&deliver.TLSConfig{CAPEM: broker.caPEM}, ""},
		{&deliver.TLSConfig{InsecureSkipVerify: true}, ""},
		{nil, "certificate"},
		{&deliver.TLSConfig{CAPEM: broker.caPEM, ServerName: "other.example"}, "other.example"},
	} {
		tg, err := rabbitmq.New(context.Background(), rabbitmq.Config{URL: url, RoutingKey: queue, TLS: tc.tls, Timeout: 5 * time.Second})
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("TLS %+v: err = %v, want one containing %q", tc.tls, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("TLS %+v: %v", tc.tls, err)
		}
		for _, err := range tg.Publish(context.Background(), batch(unique("tls"), 1, 10)) {
			if err != nil {
				t.Fatal(err)
			}
		}
		tg.Close()
	}
	if got := drain(t, ch, queue); len(got) != 2 {
		t.Fatalf("%d messages arrived over TLS, want 2", len(got))
	}
}

func TestExchangeDeletedThenRecreated(t *testing.T) {
	ch := admin(t)
	exchange, key, queue := boundQueue(t, ch, nil)
	tg := newTarget(t, rabbitmq.Config{Exchange: exchange, RoutingKey: key})
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		t.Fatal(err)
	}
	// The broker closes the channel with 404: every message fails saying so.
	for i, err := range tg.Publish(context.Background(), batch("gone", 3, 1)) {
		if err == nil || !strings.Contains(err.Error(), "no exchange") {
			t.Fatalf("message %d: err = %v, want the broker's 404", i, err)
		}
	}
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	for i, err := range tg.Publish(context.Background(), batch("back", 3, 1)) {
		if err != nil {
			t.Fatalf("after re-creating the exchange, message %d: %v", i, err)
		}
	}
	if got := drain(t, ch, queue); len(got) != 3 {
		t.Fatalf("%d messages arrived, want 3", len(got))
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	ch := admin(t) // closed after the check: its goroutines are not ours
	exchange, key, _ := boundQueue(t, ch, nil)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tg, err := rabbitmq.New(context.Background(), rabbitmq.Config{URL: broker.url(), Exchange: exchange, RoutingKey: key})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ { // several channels
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, err := range tg.Publish(context.Background(), batch(unique("leak"), 5, 1)) {
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseThenPublishFails(t *testing.T) {
	tg, err := rabbitmq.New(context.Background(), rabbitmq.Config{URL: broker.url(), RoutingKey: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	for _, err := range tg.Publish(context.Background(), batch("c", 2, 1)) {
		if !errors.Is(err, rabbitmq.ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	}
}

// TestBrokerKilledMidBatch blocks the broker's publishers (memory alarm)
// so a batch stays unconfirmed, kills the node, and checks that the batch
// fails, and that the target reconnects once the node is back.
// It restarts the shared node, so it runs last.
func TestBrokerKilledMidBatch(t *testing.T) {
	ch := admin(t)
	// A durable queue bound on the default exchange survives the restart.
	queue := unique("durable")
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	tg := newTarget(t, rabbitmq.Config{RoutingKey: queue, Timeout: 5 * time.Second})
	if errs := tg.Publish(context.Background(), batch("warm", 1, 1)); errs[0] != nil {
		t.Fatal(errs[0])
	}

	// Block publishers and wait until the broker says so to a connection
	// of ours.
	if err := broker.ctl("set_vm_memory_high_watermark", "0"); err != nil {
		t.Fatal(err)
	}
	probe, err := amqp.Dial(broker.url())
	if err != nil {
		t.Fatal(err)
	}
	blocked := probe.NotifyBlocked(make(chan amqp.Blocking, 1))
	pch, err := probe.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pch.Publish("", queue, false, false, amqp.Publishing{Body: []byte("probe")}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-blocked:
		if !b.Active {
			t.Fatalf("blocking notification %+v", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the broker did not block publishers after the memory alarm")
	}

	msgs := batch("k", 20, 10)
	done := make(chan []error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		done <- tg.Publish(ctx, msgs)
	}()
	time.Sleep(time.Second) // let the batch reach the blocked broker
	select {
	case errs := <-done:
		t.Fatalf("batch finished while the broker was blocked: %v", errs)
	default:
	}
	broker.kill()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish did not return after the broker was killed")
	}
	for i, err := range errs {
		if err == nil {
			t.Errorf("message %d confirmed by a blocked broker that was then killed", i)
		} else if i == 0 {
			t.Logf("message 0: %v", err)
		}
	}

	// While the node is down a batch fails fast with a connection error.
	for _, err := range tg.Publish(context.Background(), msgs[:1]) {
		if err == nil || !strings.Contains(err.Error(), "connect") {
			t.Fatalf("publish to a dead broker: err = %v, want a connect error", err)
		}
	}

	if err := broker.boot(); err != nil {
		t.Fatal(err)
	}
	// A queue declared seconds before a kill -9 may not have reached
	// Mnesia's disk log (seen on 3.10): declare it again (idempotent) so
	// that what is tested is the target's reconnect, not that.
	if _, err := admin(t).QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i, err := range tg.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("after restart, message %d: %v", i, err)
		}
	}
	ch2 := admin(t)
	got := 0
	for _, d := range drain(t, ch2, queue) {
		if strings.HasPrefix(d.MessageId, "k-") {
			got++
		}
	}
	if got != len(msgs) {
		t.Fatalf("after restart the queue holds %d of the batch, want %d", got, len(msgs))
	}
}

// benchQueue declares a durable queue of kind (classic or quorum) kept
// bounded by dropping its oldest messages (they were confirmed).
func benchQueue(b *testing.B, kind string) string {
	queue := unique("bench-" + kind)
	args := amqp.Table{"x-max-length": int32(20000)}
	if kind == "quorum" {
		args["x-queue-type"] = "quorum"
	}
	ch := admin(b)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = admin(b).QueueDelete(queue, false, false, false) })
	return queue
}

// benchLanes is how many batches are in flight at once, and benchBatch
// their size: the deliver runtime's 4 lanes at max_in_flight 1000.
const benchLanes, benchBatch = 4, 250

// runLanes runs benchLanes goroutines, each publishing batches of
// benchBatch with publish until b.N batches are done in all.
func runLanes(b *testing.B, publish func(lane int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchLanes)
	b.SetBytes(benchBatch * 1024)
	b.ResetTimer()
	for lane := range benchLanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := publish(lane); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkPublish is the target's confirmed rate into a durable queue:
// 4 batches of 250 in flight, 1 KiB persistent messages.
func BenchmarkPublish(b *testing.B) {
	for _, kind := range []string{"classic", "quorum"} {
		b.Run(kind, func(b *testing.B) {
			tg := newTarget(b, rabbitmq.Config{RoutingKey: benchQueue(b, kind)})
			msgs := batch("b", benchBatch, 1024)
			runLanes(b, func(int) error {
				for _, err := range tg.Publish(context.Background(), msgs) {
					if err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// BenchmarkBrokerAlone is the ceiling BenchmarkPublish is judged by: the
// same batches from a plain amqp091 publisher (a confirm-mode channel per
// lane, deferred confirmations, no headers, not mandatory).
func BenchmarkBrokerAlone(b *testing.B) {
	for _, kind := range []string{"classic", "quorum"} {
		b.Run(kind, func(b *testing.B) {
			queue := benchQueue(b, kind)
			conn, err := amqp.Dial(broker.url())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			chans := make([]*amqp.Channel, benchLanes)
			for i := range chans {
				if chans[i], err = conn.Channel(); err != nil {
					b.Fatal(err)
				}
				if err := chans[i].Confirm(false); err != nil {
					b.Fatal(err)
				}
			}
			body := bytes.Repeat([]byte("x"), 1024)
			runLanes(b, func(lane int) error {
				dcs := make([]*amqp.DeferredConfirmation, benchBatch)
				for i := range dcs {
					dc, err := chans[lane].PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
						amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body})
					if err != nil {
						return err
					}
					dcs[i] = dc
				}
				for _, dc := range dcs {
					if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
						return fmt.Errorf("not confirmed: %v", err)
					}
				}
				return nil
			})
		})
	}
}
