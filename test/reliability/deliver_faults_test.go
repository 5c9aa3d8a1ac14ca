package reliability

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq"
)

// killBroker kills a broker and starts it again, kills times while l's
// sends run (0.5–3 s apart, down 0.3–1.5 s), then waits for the sends. It
// returns the acked sends at each kill and each start's boot time.
func (l *deliverLoad) killBroker(rng *lockedRand, kills int, kill, start func()) (sentAtKills []int64, bootMS []float64) {
	for range kills {
		time.Sleep(rng.Dur(500*time.Millisecond, 3*time.Second))
		sentAtKills = append(sentAtKills, l.acked.Load())
		kill()
		time.Sleep(rng.Dur(300*time.Millisecond, 1500*time.Millisecond))
		booted := time.Now()
		start()
		bootMS = append(bootMS, ms(time.Since(booted)))
	}
	l.wg.Wait()
	return sentAtKills, bootMS
}

// deliverLoad sends n messages with client-made ids and delays of
// 0–maxDelay, paced over sendFor by 4 senders, each retried (same id, so
// deduplicated) until answered ok or 60 s passed: a send cut short by a
// kill is answered by the restarted server.
type deliverLoad struct {
	mu    sync.Mutex
	due   map[string]time.Time
	acked atomic.Int64
	wg    sync.WaitGroup
}

func sendDeliverLoad(t *testing.T, c *delayq.Client, topic string, rng *lockedRand, n int, sendFor, maxDelay time.Duration) *deliverLoad {
	l := &deliverLoad{due: make(map[string]time.Time, n)}
	const senders = 4
	start := time.Now()
	for w := range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w; i < n; i += senders {
				if d := time.Until(start.Add(sendFor * time.Duration(i) / time.Duration(n))); d > 0 {
					time.Sleep(d)
				}
				id := "m-" + strconv.Itoa(i)
				delay := rng.Dur(0, maxDelay)
				giveUp := time.Now().Add(60 * time.Second)
				for {
					m, err := c.Send(context.Background(), topic, delayq.NewSendRequest([]byte(id), delayq.WithID(id), delayq.After(delay)))
					if err == nil {
						l.mu.Lock()
						l.due[id] = m.DeliverAt
						l.mu.Unlock()
						l.acked.Add(1)
						break
					}
					if time.Now().After(giveUp) {
						t.Errorf("send %s: %v", id, err)
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

// drainTopic waits until nothing of topic is scheduled, ready or in
// flight, and answers its dead count.
func drainTopic(t *testing.T, c *delayq.Client, topic string, limit time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ti, err := c.Topic(context.Background(), topic)
		if err == nil && ti.Counts.Scheduled+ti.Counts.Ready+ti.Counts.Inflight == 0 {
			return ti.Counts.Dead
		}
		if time.Now().After(deadline) {
			t.Fatalf("delayq did not drain %s into the broker within %s: %+v %v", topic, limit, ti, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deliverS32 gives topic d (its Timeout 1 s) and retries that outlast a
// broker's restarts: 1,000 attempts, backoff 100 ms to 1 s.
func deliverS32(t *testing.T, c *delayq.Client, topic string, d delayq.DeliverSettings) {
	t.Helper()
	d.Timeout = time.Second
	if _, err := c.SetTopicSettings(context.Background(), topic, delayq.TopicSettings{
		MaxAttempts: 1000,
		Backoff:     delayq.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2},
		Deliver:     &d,
	}); err != nil {
		t.Fatal(err)
	}
}

// killBrokerUnderLoad sends 4,000 (full: 20,000) messages over sendFor
// while the broker is killed 3 (10) times, then waits up to drain for
// delayq to deliver them all; the caller reads the broker into the
// result's brokerCheck.
func killBrokerUnderLoad(t *testing.T, c *delayq.Client, topic string, sendFor, drain time.Duration, kill, start func()) (brokerKillResult, *deliverLoad) {
	t.Helper()
	rng := newRand(seed(t))
	n := pick(4000, 20_000)
	kills := pick(3, 10)
	load := sendDeliverLoad(t, c, topic, rng, n, sendFor, 2*time.Second)
	sentAtKills, bootMS := load.killBroker(rng, kills, kill, start)
	res := brokerKillResult{Messages: n, AckedSends: len(load.due), Kills: kills, SentAtKills: sentAtKills, BootMS: bootMS}
	res.Dead = drainTopic(t, c, topic, drain)
	return res, load
}

// brokerKillResult is what an S32 run found: the load, the kills, and
// what the broker held afterwards.
type brokerKillResult struct {
	Messages    int       `json:"messages"`
	AckedSends  int       `json:"acked_sends"`
	Kills       int       `json:"broker_kills"`
	SentAtKills []int64   `json:"acked_sends_at_each_kill"`
	BootMS      []float64 `json:"boot_ms"`
	brokerCheck
	Dead int64 `json:"dead"`
}

// judge writes the result file and fails t on anything lost, early,
// unknown or dead, on more than maxDuplicates duplicates, and when
// nothing was checked.
func (res brokerKillResult) judge(t *testing.T, name string, maxDuplicates int) {
	t.Helper()
	writeResults(t, name, res)
	if res.AckedSends == 0 || res.Entries == 0 {
		t.Fatalf("nothing checked: %+v", res)
	}
	if res.Lost != 0 || res.Early != 0 || res.Unexpected != 0 || res.Dead != 0 {
		t.Errorf("guarantees violated: %+v", res)
	}
	if res.Duplicated > maxDuplicates {
		t.Errorf("%d duplicates, more than %d", res.Duplicated, maxDuplicates)
	}
}

// brokerCheck is what a broker holds against what was sent.
type brokerCheck struct {
	Entries    int `json:"broker_entries"`
	Lost       int `json:"lost"`
	Early      int `json:"early"`
	Unexpected int `json:"unexpected"`
	Duplicated int `json:"duplicated"`
}

// check judges (id, broker time) pairs: every sent id must be there
// (lost), none stored before its due time (early), none unknown.
func check(due map[string]time.Time, entries []brokerEntry) brokerCheck {
	res := brokerCheck{Entries: len(entries)}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		d, ok := due[e.id]
		switch {
		case !ok:
			res.Unexpected++
			continue
		case seen[e.id]:
			res.Duplicated++
		}
		seen[e.id] = true
		if e.at.Before(d.Truncate(time.Millisecond)) {
			res.Early++
		}
	}
	for id := range due {
		if !seen[id] {
			res.Lost++
		}
	}
	return res
}

type brokerEntry struct {
	id string
	at time.Time // when the broker stored it, by its clock (this machine's)
}

func streamEntries(t *testing.T, addr, stream string) []brokerEntry {
	t.Helper()
	xs, err := rdb(t, addr).XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]brokerEntry, 0, len(xs))
	for _, x := range xs {
		id, _ := x.Values["id"].(string)
		msec, _ := strconv.ParseInt(strings.SplitN(x.ID, "-", 2)[0], 10, 64)
		out = append(out, brokerEntry{id: id, at: time.UnixMilli(msec)})
	}
	return out
}

type s33Results struct {
	Messages       int     `json:"messages"`
	AckedSends     int     `json:"acked_sends"`
	FreezeMS       float64 `json:"freeze_ms"`
	MaxInFlight    int64   `json:"max_in_flight_seen"`
	AckedWhileDown int64   `json:"confirmed_while_frozen"`
	Samples        int     `json:"samples_while_frozen"`
	brokerCheck
	Dead    int64   `json:"dead"`
	DrainMS float64 `json:"drain_after_thaw_ms"`
}

// TestS33DeliverBrokerNeverConfirms: the broker (a Redis stream target)
// is frozen with SIGSTOP under load, so its port still accepts
// connections and publishes but nothing is answered. While frozen, what
// delayq has in flight stays within max_in_flight and nothing is acked;
// once thawed, everything is delivered (lost 0, early 0, nothing dead).
// The publishes that timed out while frozen are executed by the broker
// when it resumes and published again by delayq: duplicates, counted and
// bounded by max_in_flight per timed-out round.
func TestS33DeliverBrokerNeverConfirms(t *testing.T) {
	broker := startRedis(t, "always")
	pid := redisPID(t, broker.Addr())
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 5*time.Second)
	const topic, maxInFlight = "s33", 64
	timeout := time.Second
	if _, err := c.SetTopicSettings(context.Background(), topic, delayq.TopicSettings{
		MaxAttempts: 1000,
		Backoff:     delayq.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2},
		Deliver: &delayq.DeliverSettings{Redis: &delayq.RedisTarget{Addr: broker.Addr(), Stream: topic},
			Timeout: timeout, MaxInFlight: maxInFlight},
	}); err != nil {
		t.Fatal(err)
	}
	rng := newRand(seed(t))
	n := pick(3000, 20_000)
	sendFor := pick(10*time.Second, 40*time.Second)
	freeze := pick(5*time.Second, 15*time.Second)
	load := sendDeliverLoad(t, c, topic, rng, n, sendFor, 2*time.Second)

	time.Sleep(2 * time.Second) // delivering under load
	res := s33Results{Messages: n, FreezeMS: ms(freeze)}
	stopCont(pid, true)
	frozen := time.Now()
	// A publish begun before the freeze has returned, confirmed or not,
	// by its timeout: confirmations are counted from then on (plus half a
	// second for a loaded machine's scheduling). A message is acked only
	// once confirmed, so none confirmed means none acked.
	time.Sleep(timeout + 500*time.Millisecond)
	// The server's own counter of confirmed publishes: exact, whatever
	// the senders do meanwhile. In flight from the topic's counts.
	ackedAt := func() (int64, bool) {
		if ti, err := c.Topic(context.Background(), topic); err == nil {
			res.MaxInFlight = max(res.MaxInFlight, ti.Counts.Inflight)
		}
		n, err := scrapeCounterSum(p.url(), "delayq_deliver_published_total")
		return int64(n), err == nil
	}
	base, ok := ackedAt()
	for !ok {
		base, ok = ackedAt()
	}
	for time.Since(frozen) < freeze {
		time.Sleep(100 * time.Millisecond)
		if a, ok := ackedAt(); ok {
			res.Samples++
			res.AckedWhileDown = max(res.AckedWhileDown, a-base)
		}
	}
	stopCont(pid, false)
	thawed := time.Now()
	load.wg.Wait()
	res.AckedSends = len(load.due)
	res.Dead = drainTopic(t, c, topic, 90*time.Second)
	res.DrainMS = ms(time.Since(thawed))
	res.brokerCheck = check(load.due, streamEntries(t, broker.Addr(), topic))
	writeResults(t, "S33-deliver-broker-never-confirms", res)
	if res.AckedSends == 0 || res.Entries == 0 || res.Samples == 0 {
		t.Fatalf("nothing checked: %+v", res)
	}
	if res.MaxInFlight > maxInFlight {
		t.Errorf("%d messages in flight while the broker was frozen, max_in_flight is %d", res.MaxInFlight, maxInFlight)
	}
	if res.AckedWhileDown > 0 {
		t.Errorf("%d messages counted as confirmed (so acked) while the broker was frozen", res.AckedWhileDown)
	}
	if res.Lost != 0 || res.Early != 0 || res.Unexpected != 0 || res.Dead != 0 {
		t.Errorf("guarantees violated: %+v", res)
	}
	// Each timed-out round put at most max_in_flight publishes into the
	// frozen broker's socket buffers; a round lasts at least the timeout.
	if bound := maxInFlight * (int(freeze/timeout) + 2); res.Duplicated > bound {
		t.Errorf("%d duplicates, more than %d (max_in_flight per timed-out round)", res.Duplicated, bound)
	}
}

type s34Results struct {
	Target     string `json:"target"`
	Messages   int    `json:"messages"`
	AckedSends int    `json:"acked_sends"`
	Kills      int    `json:"delayq_kills"`
	brokerCheck
	Dead int64 `json:"dead"`
}

// TestS34DeliverServerKill9: `delayq serve` is killed with SIGKILL while
// it forwards under load (publishes in flight, confirmed ones not yet
// acked) and restarted on the same data. Every acked send must reach the
// broker (lost 0), none before its due time (early 0), nothing dead. A
// message published but not acked when the server died is published
// again once its lease expires (timeout + 5 s): at most max_in_flight
// duplicates per kill on a Redis stream, none on a JetStream stream,
// which drops a Nats-Msg-Id it has seen within its duplicate window.
func TestS34DeliverServerKill9(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		broker := startRedis(t, "always")
		target := &delayq.DeliverSettings{Redis: &delayq.RedisTarget{Addr: broker.Addr(), Stream: "s34"}}
		runS34(t, "redis", target, func() []brokerEntry { return streamEntries(t, broker.Addr(), "s34") }, -1)
	})
	t.Run("nats", func(t *testing.T) {
		url := startJetStream(t)
		st := createStream(t, url, "S34", "s34.out")
		target := &delayq.DeliverSettings{NATS: &delayq.NATSTarget{URL: url, Subject: "s34.out"}}
		runS34(t, "nats", target, func() []brokerEntry { return jetStreamEntries(t, st) }, 0)
	})
}

// runS34 runs the load and the kills against one target; dupBound < 0
// means max_in_flight per kill.
func runS34(t *testing.T, name string, target *delayq.DeliverSettings, entries func() []brokerEntry, dupBound int) {
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 5*time.Second)
	const topic, maxInFlight = "s34", 64
	target.Timeout, target.MaxInFlight = time.Second, maxInFlight
	if _, err := c.SetTopicSettings(context.Background(), topic, delayq.TopicSettings{
		MaxAttempts: 1000,
		Backoff:     delayq.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2},
		Deliver:     target,
	}); err != nil {
		t.Fatal(err)
	}
	rng := newRand(seed(t))
	n := pick(3000, 20_000)
	kills := pick(3, 8)
	sendFor := pick(10*time.Second, 40*time.Second)
	load := sendDeliverLoad(t, c, topic, rng, n, sendFor, 2*time.Second)
	for range kills {
		time.Sleep(rng.Dur(time.Second, 3*time.Second))
		p.kill9()
		time.Sleep(rng.Dur(100*time.Millisecond, 500*time.Millisecond))
		p.start()
	}
	load.wg.Wait()
	res := s34Results{Target: name, Messages: n, AckedSends: len(load.due), Kills: kills}
	res.Dead = drainTopic(t, c, topic, 90*time.Second)
	res.brokerCheck = check(load.due, entries())
	writeResults(t, "S34-deliver-server-kill9-"+name, res)
	if res.AckedSends == 0 || res.Entries == 0 {
		t.Fatalf("nothing checked: %+v", res)
	}
	if res.Lost != 0 || res.Early != 0 || res.Unexpected != 0 || res.Dead != 0 {
		t.Errorf("guarantees violated: %+v", res)
	}
	if dupBound < 0 {
		dupBound = kills * maxInFlight
	}
	if res.Duplicated > dupBound {
		t.Errorf("%d duplicates, more than %d", res.Duplicated, dupBound)
	}
}

// TestS32DeliverBrokerKillNATS is S32 on a NATS JetStream target: the
// nats-server (file storage) is killed with SIGKILL and restarted on its
// port and store under load. Lost 0, early 0 (by the stream's store
// time), nothing dead; duplicates are counted, and the stream's
// duplicate window (2 minutes, longer than the run) drops a
// republished Nats-Msg-Id, so they must be 0.
func TestS32DeliverBrokerKillNATS(t *testing.T) {
	broker := startJetStreamServer(t)
	createStream(t, broker.url, "S32", "s32.out")
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 5*time.Second)
	const topic = "s32"
	deliverS32(t, c, topic, delayq.DeliverSettings{NATS: &delayq.NATSTarget{URL: broker.url, Subject: "s32.out"}, MaxInFlight: 64})
	// A node boots in seconds (more under load), so the sends are spread
	// over longer than in the other S32s for every kill to hit live load.
	res, load := killBrokerUnderLoad(t, c, topic, pick(40*time.Second, 120*time.Second), 90*time.Second, broker.kill, broker.start)
	// The stream handle is re-opened: the server restarted.
	res.brokerCheck = check(load.due, jetStreamEntries(t, openStream(t, broker.url, "S32")))
	res.judge(t, "S32-deliver-broker-kill-nats", 0)
}

// TestS32DeliverBrokerKillRabbitMQ is S32 on a RabbitMQ target: a node
// of the test's own (durable classic queue, persistent messages,
// publisher confirms) is killed with SIGKILL and restarted on its port
// and data under load. A consumer reads the queue throughout, through the
// kills. Lost 0; early 0 by the consumer's receive time (later than the
// broker's store time, so a weaker check than the stream's); nothing dead;
// duplicates (confirms lost in a kill) at most max_in_flight per kill.
func TestS32DeliverBrokerKillRabbitMQ(t *testing.T) {
	broker := startRabbitServer(t)
	const queue, maxInFlight = "s32", 64
	consumer := consumeRabbit(broker.url(), queue)
	// The consumer declares the queue; publish only once it exists.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if conn, err := amqp.Dial(broker.url()); err == nil {
			ch, err := conn.Channel()
			if err == nil {
				_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			}
			_ = conn.Close()
			if err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer did not declare the queue within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 5*time.Second)
	const topic = "s32"
	deliverS32(t, c, topic, delayq.DeliverSettings{RabbitMQ: &delayq.RabbitMQTarget{URL: broker.url(), RoutingKey: queue}, MaxInFlight: maxInFlight})
	// A node boots in seconds (more under load), so the sends are spread
	// over longer than in the other S32s for every kill to hit live load.
	res, load := killBrokerUnderLoad(t, c, topic, pick(40*time.Second, 120*time.Second), 120*time.Second, broker.kill, broker.start)
	// Everything is confirmed; give the consumer time to read it.
	for deadline := time.Now().Add(30 * time.Second); consumer.count() < len(load.due) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	res.brokerCheck = check(load.due, consumer.close())
	res.judge(t, "S32-deliver-broker-kill-rabbitmq", res.Kills*maxInFlight)
}

// TestS32DeliverBrokerKillKafka is S32 on a Kafka target. No Kafka
// broker is packaged here, so the broker is franz-go's kfake run as a
// process of its own (kafka_harness_test.go) that fsyncs every produce
// before acknowledging it and keeps its log in a directory it reloads:
// killed with SIGKILL and restarted on its port and data under load.
// Lost 0; early 0 by the records' timestamps (set by delayq's producer
// when it published, so stricter than the broker's store time); nothing
// dead; duplicates at most twice max_in_flight per kill: a kill can cost
// each in-flight record two extra copies, one when the producer's own
// retry reaches the restarted broker, which wrote the first attempt but
// may have lost the producer's sequence state that dedups it, and one
// when delayq's publish timed out meanwhile and it publishes again.
func TestS32DeliverBrokerKillKafka(t *testing.T) {
	const topic, out, maxInFlight = "s32", "s32-out", 64
	broker := startKafkaBroker(t, out)
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 5*time.Second)
	deliverS32(t, c, topic, delayq.DeliverSettings{Kafka: &delayq.KafkaTarget{Brokers: []string{broker.addr}, Topic: out}, MaxInFlight: maxInFlight})
	res, load := killBrokerUnderLoad(t, c, topic, pick(30*time.Second, 120*time.Second), 120*time.Second, broker.kill, broker.start)
	res.brokerCheck = check(load.due, kafkaEntries(t, broker.addr, out, len(load.due)))
	res.judge(t, "S32-deliver-broker-kill-kafka", 2*res.Kills*maxInFlight)
}
