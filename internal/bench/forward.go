package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ScenarioForward measures broker delivery (a topic's `deliver` settings):
// its targets are delayq servers that forward due messages to a broker,
// and a "delivery" is the broker's confirmation of a publish. It is not
// part of "all": it needs brokers (Brokers), not --target.
const ScenarioForward = "forward"

// BrokerScenarios are the scenarios whose targets come from Brokers.
var BrokerScenarios = []string{ScenarioForward}

// Brokers are the broker addresses the forward scenario publishes to; an
// empty one is skipped.
type Brokers struct {
	Redis    string // redis://[user:pass@]host:port[/db]
	RabbitMQ string // amqp://user:pass@host:port/vhost
	// RabbitMQQueue is the type of the declared durable queue: "classic",
	// "quorum", or both comma-separated (one target each); "": classic.
	RabbitMQQueue string
	NATS          string // nats://host:port (JetStream enabled)
	Kafka         string // host:port[,host:port…]
}

// ForwardResolver makes one forward target per broker given, and names
// the brokers it skipped and why.
type ForwardResolver func(b Brokers, maxInFlight int) (facs []Factory, skipped []string, err error)

var forwardMetrics = []Metric{
	{Key: "fwd_msgs_per_s", Label: "forwarding rate, due backlog, confirmed", Unit: "msgs/s", Higher: true},
	{Key: "backlog_missing", Label: "backlog: not confirmed", Count: true},
	{Key: "backlog_early", Label: "backlog: confirmed before due", Count: true},
	{Key: "backlog_duplicates", Label: "backlog: confirmed twice", Count: true},
	{Key: "checked", Label: "paced: messages checked", Count: true},
	{Key: "p50_ms", Label: "paced: due → confirm p50", Unit: "ms"},
	{Key: "p99_ms", Label: "paced: due → confirm p99", Unit: "ms"},
	{Key: "max_ms", Label: "paced: due → confirm max", Unit: "ms"},
	{Key: "early", Label: "paced: early", Count: true},
	{Key: "duplicates", Label: "paced: duplicates", Count: true},
	{Key: "missing", Label: "paced: missing", Count: true},
}

// Holder is implemented by targets that can hold back delivery (a paused
// topic): the forward scenario then fills its backlog held and releases
// it whole, so the rate measures forwarding alone, however slow the fill.
type Holder interface {
	Hold(ctx context.Context, held bool) error
}

// backlogLead is how long after the start of the backlog fill its
// messages are due: enough for the fill at 20,000 msgs/s plus 2 s, so
// the whole backlog is stored before the first one may be forwarded.
func backlogLead(n int) time.Duration {
	return 2*time.Second + time.Duration(float64(n)/20000*float64(time.Second))
}

// runForward runs the two phases of the forward scenario on a target
// whose deliveries are broker confirmations:
//
//   - backlog: c.N messages (batches of c.Batch from c.Concurrency
//     senders) all due at one instant after the fill (backlogLead); the rate is
//     confirmed messages / (last confirmation − due time);
//   - paced: c.Rate × c.Duration single sends, each due c.Lead after it
//     is sent, while the server forwards: due → confirm percentiles.
//
// Both count early, duplicate and missing confirmations. A run in which
// nothing at all was confirmed is an error.
func runForward(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	var r RunResult
	ck := NewChecker(c.N)
	start := time.Now()
	due := msTrunc(start.Add(backlogLead(c.N)))
	holder, held := t.(Holder)
	if held {
		if err := holder.Hold(ctx, true); err != nil {
			return r, fmt.Errorf("hold delivery: %w", err)
		}
		due = msTrunc(start) // due at once, released after the fill
	}
	n := uint64(c.N) // #nosec G115 -- benchmark message count, ≥ 1
	for s := range n {
		ck.SetDue(s, due)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumed := make(chan error, 1)
	p.Phase("backlog: fill, then forward", int64(c.N))
	go func() {
		consumed <- consumeUntil(cctx, t, ConsumeOptions{Consumers: 1, Max: c.LeaseMax, Wait: c.Wait}, ck, p,
			func() bool { return ck.Unique() >= int64(c.N) }, due, c.Grace)
	}()
	sp := sendPlan{n: c.N, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed),
		due: func(uint64, time.Time) time.Time { return due }}
	_, err := sp.run(cctx, t)
	filled := time.Now()
	if err == nil && held {
		if err = holder.Hold(cctx, false); err != nil {
			err = fmt.Errorf("release delivery: %w", err)
		}
	}
	if err != nil {
		cancel()
		<-consumed
		return r, fmt.Errorf("backlog fill: %w", err)
	}
	from := max64t(due, start)
	if held {
		from = filled
	}
	if err := <-consumed; err != nil {
		return r, err
	}
	if !held && filled.After(due) {
		r.Notes = append(r.Notes, fmt.Sprintf("the backlog fill ended %s after the messages were due (raise --lead): the rate includes part of the fill", filled.Sub(due).Round(time.Millisecond)))
	}
	var last time.Time
	for s := range n {
		if at, ok := ck.Received(s); ok {
			last = max64t(last, at)
		}
	}
	res := ck.Result(nil)
	if res.Received > 0 && last.After(from) {
		r.set("fwd_msgs_per_s", float64(res.Received)/last.Sub(from).Seconds())
	}
	r.set("backlog_missing", float64(res.Missing))
	r.set("backlog_early", float64(res.Early))
	r.set("backlog_duplicates", float64(res.Duplicates+res.Unexpected))
	if res.Early > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("backlog: %d confirmed before they were due, by up to %s", res.Early, res.MostEarly))
	}
	backlogReceived := res.Received

	pc := c
	pc.N = max(1, int(c.Rate*c.Duration.Seconds()))
	pc.Batch = 1
	pr, err := runPaced(ctx, pc, t, p)
	if err != nil {
		return r, fmt.Errorf("paced: %w", err)
	}
	for k, v := range pr.Values {
		switch k {
		case "checked", "p50_ms", "p99_ms", "max_ms", "early", "duplicates", "missing":
			r.set(k, v)
		}
	}
	r.Lateness = pr.Lateness
	for _, note := range pr.Notes {
		r.Notes = append(r.Notes, "paced: "+note)
	}
	r.Msgs = int64(c.N + pc.N)
	if backlogReceived == 0 && pr.Lateness.Count() == 0 {
		return r, errors.New("no message was confirmed by the broker")
	}
	return r, nil
}
