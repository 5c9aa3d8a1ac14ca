package dqtarget

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/targets"
	"github.com/delayq/delayq/internal/domain"
)

// ForwardFactories is the bench.ForwardResolver of `delayq bench forward`:
// for each broker given, an embedded delayq (engine + Pebble) whose topic
// delivers to it through the server's own deliver runtime. A "delivery"
// of the benchmark is the broker's confirmation of a publish. The
// benchmark creates its destination (stream, queue, JetStream stream,
// Kafka topic) per run and deletes it afterwards.
func ForwardFactories(b bench.Brokers, maxInFlight int) ([]bench.Factory, []string, error) {
	var facs []bench.Factory
	var skipped []string
	add := func(addr, name, flag string, dest func(addr, name string) (destination, error)) {
		if addr == "" {
			skipped = append(skipped, fmt.Sprintf("%s (no %s)", name, flag))
			return
		}
		facs = append(facs, bench.Factory{Name: name, Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
			return openForward(ctx, o, maxInFlight, func(name string) (destination, error) { return dest(addr, name) })
		}})
	}
	add(b.Redis, "redis-stream", "--redis-target", redisDestination)
	if b.RabbitMQ == "" {
		add("", "rabbitmq", "--rabbitmq", nil)
	}
	if b.RabbitMQ != "" {
		kinds := strings.Split(cmp.Or(b.RabbitMQQueue, "classic"), ",")
		for _, kind := range kinds {
			kind = strings.TrimSpace(kind)
			if kind != "classic" && kind != "quorum" {
				return nil, nil, fmt.Errorf("--rabbitmq-queue %q: want classic, quorum or classic,quorum", b.RabbitMQQueue)
			}
			name := "rabbitmq"
			if len(kinds) > 1 || kind != "classic" {
				name = "rabbitmq-" + kind
			}
			add(b.RabbitMQ, name, "--rabbitmq", func(addr, name string) (destination, error) {
				return rabbitDestination(addr, name, kind)
			})
		}
	}
	add(b.NATS, "nats-jetstream", "--nats", natsDestination)
	add(b.Kafka, "kafka", "--kafka", kafkaDestination)
	if b.Redis != "" {
		if _, err := parseRedisTarget(b.Redis); err != nil {
			return nil, nil, err
		}
	}
	return facs, skipped, nil
}

// destination is where one run publishes: the deliver settings naming it,
// and how to remove it afterwards.
type destination struct {
	settings domain.DeliverSettings
	remove   func(context.Context) error
}

func parseRedisTarget(s string) (*domain.RedisTarget, error) {
	if !strings.Contains(s, "://") {
		return &domain.RedisTarget{Addr: s}, nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "redis" || u.Host == "" {
		return nil, fmt.Errorf("--redis-target %q: want host:port or redis://[user:pass@]host:port[/db]", s)
	}
	t := &domain.RedisTarget{Addr: u.Host, Username: u.User.Username()}
	t.Password, _ = u.User.Password()
	if db := strings.Trim(u.Path, "/"); db != "" {
		if t.DB, err = strconv.Atoi(db); err != nil {
			return nil, fmt.Errorf("--redis-target %q: database %q is not a number", s, db)
		}
	}
	return t, nil
}

func redisDestination(addr, name string) (destination, error) {
	t, err := parseRedisTarget(addr)
	if err != nil {
		return destination{}, err
	}
	t.Stream = name
	rdb := redis.NewClient(&redis.Options{Addr: t.Addr, Username: t.Username, Password: t.Password, DB: t.DB})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return destination{}, fmt.Errorf("redis %s: %w", t.Addr, err)
	}
	return destination{settings: domain.DeliverSettings{Redis: t}, remove: func(ctx context.Context) error {
		return errors.Join(rdb.Del(ctx, name).Err(), rdb.Close())
	}}, nil
}

// rabbitDestination declares a durable queue of kind "classic" or
// "quorum" (RabbitMQ's replicated queue; on one node it still writes a
// Raft log, and costs the broker about half the CPU per message here).
func rabbitDestination(addr, name, kind string) (destination, error) {
	conn, err := amqp.DialConfig(addr, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return destination{}, fmt.Errorf("rabbitmq: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		var args amqp.Table
		if kind == "quorum" {
			args = amqp.Table{"x-queue-type": "quorum"}
		}
		_, err = ch.QueueDeclare(name, true, false, false, false, args)
	}
	if err != nil {
		_ = conn.Close()
		return destination{}, fmt.Errorf("rabbitmq: declare queue %s: %w", name, err)
	}
	return destination{settings: domain.DeliverSettings{RabbitMQ: &domain.RabbitMQTarget{URL: addr, RoutingKey: name}},
		remove: func(context.Context) error {
			_, err := ch.QueueDelete(name, false, false, false)
			return errors.Join(err, conn.Close())
		}}, nil
}

func natsDestination(addr, name string) (destination, error) {
	nc, err := nats.Connect(addr, nats.Timeout(10*time.Second))
	if err != nil {
		return destination{}, fmt.Errorf("nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return destination{}, fmt.Errorf("nats: %w", err)
	}
	stream := strings.ReplaceAll(name, "-", "_")
	subject := strings.ReplaceAll(name, "-", ".")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// File storage and a duplicate window: what a production stream for
	// delayq would have.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		nc.Close()
		return destination{}, fmt.Errorf("nats: create stream %s: %w", stream, err)
	}
	return destination{settings: domain.DeliverSettings{NATS: &domain.NATSTarget{URL: addr, Subject: subject}},
		remove: func(ctx context.Context) error {
			err := js.DeleteStream(ctx, stream)
			nc.Close()
			return err
		}}, nil
}

func kafkaDestination(addr, name string) (destination, error) {
	brokers := strings.Split(addr, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return destination{}, fmt.Errorf("kafka: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 3, -1 // -1: the broker's default
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode != 0 {
		err = fmt.Errorf("error code %d", resp.Topics[0].ErrorCode)
	}
	if err != nil {
		cl.Close()
		return destination{}, fmt.Errorf("kafka: create topic %s: %w", name, err)
	}
	return destination{settings: domain.DeliverSettings{Kafka: &domain.KafkaTarget{Brokers: brokers, Topic: name}},
		remove: func(ctx context.Context) error {
			del := kmsg.NewPtrDeleteTopicsRequest()
			dt := kmsg.NewDeleteTopicsRequestTopic()
			dt.Topic = kmsg.StringPtr(name)
			del.Topics = append(del.Topics, dt)
			del.TopicNames = []string{name}
			_, err := del.RequestWith(ctx, cl)
			cl.Close()
			return err
		}}, nil
}

// forwardTarget is an embedded delayq whose topic delivers to a broker.
// Send schedules into it; Consume reports the broker's confirmations.
type forwardTarget struct {
	// et is a field, not embedded: the engine target's RSS, CPU and
	// Restart would measure the broker-less engine, not forwarding.
	et      *engineTarget
	svc     *deliver.Service
	dest    destination
	confirm atomic.Pointer[func([]bench.Delivery)]
}

func openForward(ctx context.Context, o bench.OpenOptions, maxInFlight int, mk func(name string) (destination, error)) (bench.Target, error) {
	dir, err := os.MkdirTemp("", "delayq-bench-")
	if err != nil {
		return nil, err
	}
	t := &forwardTarget{et: &engineTarget{dir: dir, durable: o.Durable}}
	t.et.Topic = topicName(o)
	if err := t.et.openPebble(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	fail := func(err error) (bench.Target, error) {
		return nil, errors.Join(err, t.et.Close())
	}
	if t.dest, err = mk(fmt.Sprintf("delayq-bench-%d-r%d", time.Now().UnixNano(), o.Run)); err != nil {
		return fail(err)
	}
	d := t.dest.settings
	d.MaxInFlight = maxInFlight
	// Enough attempts that a slow broker is retried, never dead-lettered.
	if _, err := t.et.eng.SetTopicSettings(ctx, t.et.Topic, domain.TopicSettings{MaxAttempts: 1000, Deliver: &d}); err != nil {
		return fail(errors.Join(err, t.dest.remove(ctx)))
	}
	t.svc, err = deliver.New(deliver.Config{Engine: t.et.eng, Logger: quietLogger(), Build: t.build})
	if err != nil {
		return fail(errors.Join(err, t.dest.remove(ctx)))
	}
	t.svc.Start()
	return t, nil
}

// build makes the real target and records every confirmation it reports.
func (t *forwardTarget) build(ctx context.Context, topic string, s domain.DeliverSettings) (deliver.Target, error) {
	inner, err := targets.New(ctx, topic, s)
	if err != nil {
		return nil, err
	}
	return confirmRecorder{Target: inner, t: t}, nil
}

type confirmRecorder struct {
	deliver.Target
	t *forwardTarget
}

func (r confirmRecorder) Publish(ctx context.Context, msgs []deliver.Message) []error {
	errs := r.Target.Publish(ctx, msgs)
	now := time.Now()
	ds := make([]bench.Delivery, 0, len(msgs))
	for i, m := range msgs {
		if i < len(errs) && errs[i] == nil {
			if seq, err := bench.SeqOf(m.Payload); err == nil {
				ds = append(ds, bench.Delivery{Seq: seq, At: now})
			}
		}
	}
	if h := r.t.confirm.Load(); h != nil && len(ds) > 0 {
		(*h)(ds)
	}
	return errs
}

// Send implements bench.Target: it schedules into the embedded delayq.
func (t *forwardTarget) Send(ctx context.Context, msgs []bench.Msg) error {
	return t.et.Send(ctx, msgs)
}

// Hold implements bench.Holder: it pauses (or resumes) the topic, so no
// lease, and so no publish, happens while the backlog is written.
func (t *forwardTarget) Hold(ctx context.Context, held bool) error {
	_, err := t.et.eng.PauseTopic(ctx, t.et.Topic, held)
	return err
}

// Consume implements bench.Target: it hands over the broker's
// confirmations until ctx ends (the server publishes; opts do not apply).
func (t *forwardTarget) Consume(ctx context.Context, _ bench.ConsumeOptions, handle func([]bench.Delivery)) error {
	t.confirm.Store(&handle)
	<-ctx.Done()
	t.confirm.Store(nil)
	return nil
}

// Close implements bench.Target.
func (t *forwardTarget) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.svc.Stop(ctx)
	err = errors.Join(err, t.dest.remove(ctx))
	return errors.Join(err, t.et.Close())
}
