// Package delayqtest runs a delayq queue in memory on a clock that only the
// test moves, so handlers and producers are tested without a server and
// without waiting: "30 minutes later" is a call to Advance.
//
//	q := delayqtest.NewQueue(t)
//	q.Send(ctx, "order-timeouts", delayq.NewSendRequest(payload, delayq.After(30*time.Minute)))
//	q.Advance(30 * time.Minute)
//	res := q.Work(ctx, "order-timeouts", delayq.HandlerFunc(closeUnpaidOrder))
//
// A Queue is the engine a delayq server runs, on its in-memory store: the
// same validation, states, retries, leases, dead letters, idempotent sends
// and recurring schedules. It implements delayq.Queue and delayq.Scheduler,
// so code written against those interfaces (a delayq.Worker, a producer
// holding a delayq.Queue) runs on it unchanged.
//
// # Time
//
// The queue's clock starts at the real time (or WithStart) and moves only
// when the test calls Advance or AdvanceTo. Delays, due times, leases,
// retry backoff, the dedup window and schedule ticks all count on it.
// Still on the real clock: a Lease request's Wait and a delayq.Worker's own
// timers (lease extension, ack batching).
//
// Advance is deterministic. The engine's timers sleep on the real clock,
// so on their own they would notice the jump up to a second later; Advance
// therefore moves the clock and then does the engine's due work itself, on
// the calling goroutine: it fires the schedules whose tick has come,
// expires the leases that ended, promotes every due message and forgets
// the acked ids whose dedup window is over. When it
// returns, every message due at the new time is ready: a Lease with no
// Wait gets it, and waiting long-polls (a Worker's) have been woken. No
// sleep and no polling is needed in the test, and nothing due later than
// the new time is released: never early.
//
// A jump does not step through the instants it skips: everything that
// came due in between becomes ready together, and nothing is delivered
// while the clock moves: a message nacked before a one-hour jump is
// delivered once after it, not once per backoff interval the jump spans,
// and a schedule fires once per Advance, with its latest tick, as it does
// after a downtime. Advance in steps to see each retry or tick.
//
// # Handlers
//
// Work runs a handler on the messages that are ready, synchronously, and
// acks or nacks each as a delayq.Worker would; its results say what the
// handler returned. A real delayq.Worker on the Queue works too (see the
// example), but its handlers run on its goroutines: wait for their effect
// (a channel) rather than sleeping.
//
// Methods that return no error (NewQueue, Advance, AdvanceTo, Work) stop
// the test with tb.Fatalf when the queue fails, so call them from the
// goroutine running the test. Every method is safe for concurrent use.
package delayqtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

// Option configures NewQueue.
type Option func(*config)

type config struct {
	start    time.Time
	defaults delayq.TopicSettings
}

// WithStart sets the clock's first reading (to the millisecond, the
// engine's resolution), for tests that need a fixed date: a schedule's
// tick, a time zone's DST day. The default is the real time at NewQueue.
func WithStart(t time.Time) Option {
	return func(c *config) { c.start = t }
}

// WithTopicDefaults sets the settings of topics that set none, as a
// server's defaults do (zero fields keep the built-in ones: 25 attempts,
// 30 s lease, backoff 1 s ×2 up to 1 h with ±20 % jitter). A test can also
// call SetTopicSettings for one topic.
func WithTopicDefaults(s delayq.TopicSettings) Option {
	return func(c *config) { c.defaults = s }
}

// Queue is an in-memory delayq queue on a clock moved by the test. Create
// it with NewQueue.
type Queue struct {
	tb  testing.TB
	clk *clock.Sim
	e   *engine.Engine

	moving sync.Mutex // serializes clock moves, so AdvanceTo never moves it back
}

var (
	_ delayq.Queue     = (*Queue)(nil)
	_ delayq.Scheduler = (*Queue)(nil)
)

// NewQueue returns an empty queue whose clock reads the real time (or
// WithStart) until the test moves it. It is closed when the test ends
// (tb.Cleanup); calls after that fail with delayq.ErrUnavailable. The
// engine's warnings and errors go to the test log.
func NewQueue(tb testing.TB, opts ...Option) *Queue {
	tb.Helper()
	cfg := config{start: time.Now()}
	for _, o := range opts {
		o(&cfg)
	}
	// Truncate also drops the monotonic reading: the clock's readings
	// are then plain wall times, like the messages' times.
	clk := clock.NewSim(cfg.start.Truncate(time.Millisecond))
	st := memstore.New()
	logs := &testLog{tb: tb}
	e, err := engine.Open(context.Background(), engine.Config{
		Store:    st,
		Clock:    clk,
		Defaults: cfg.defaults,
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		_ = st.Close()
		tb.Fatalf("delayqtest: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			tb.Errorf("delayqtest: close the queue: %v", err)
		}
		_ = st.Close()
		logs.stop()
	})
	return &Queue{tb: tb, clk: clk, e: e}
}

// Now returns the queue's clock reading.
func (q *Queue) Now() time.Time { return q.clk.Now() }

// Advance moves the clock forward by d and returns once every message
// due by the new time is ready to lease (see the package doc). d must not
// be negative.
func (q *Queue) Advance(d time.Duration) {
	q.tb.Helper()
	if d < 0 {
		q.tb.Fatalf("delayqtest: Advance(%v): the clock only moves forward", d)
	}
	q.moving.Lock()
	q.clk.Advance(d)
	q.moving.Unlock()
	q.runDue()
}

// AdvanceTo moves the clock to t, if t is later than Now, and returns once
// every message due by then is ready to lease, as Advance does. It is
// handy with a message's DeliverAt:
//
//	m, _ = q.Get(ctx, topic, id) // after a nack: scheduled after the backoff
//	q.AdvanceTo(m.DeliverAt)
func (q *Queue) AdvanceTo(t time.Time) {
	q.tb.Helper()
	q.moving.Lock()
	if t.After(q.clk.Now()) {
		q.clk.Set(t)
	}
	q.moving.Unlock()
	q.runDue()
}

func (q *Queue) runDue() {
	q.tb.Helper()
	if err := q.e.RunDue(context.Background()); err != nil {
		q.tb.Fatalf("delayqtest: release due messages: %v", err)
	}
}

// Result is what Work did with one message.
type Result struct {
	// Message is the message as the handler got it: leased, with Attempt
	// counting this delivery.
	Message *delayq.Message
	// Err is what the handler returned (a panic is an error "panic: …").
	// Nil: the message was acked. Otherwise it was nacked with Err's text
	// and is retried after the topic's backoff, or is dead if that was its
	// last attempt.
	Err error
}

// Work leases every message of topic that is ready now, runs h on each in
// turn on the calling goroutine, and acks the message when h returns nil
// or nacks it with the error, as a delayq.Worker does. Messages that
// become ready meanwhile (sent or nacked by the handler) wait for the next
// Work. It returns one Result per message, in delivery order; none when
// nothing is ready.
func (q *Queue) Work(ctx context.Context, topic string, h delayq.Handler) []Result {
	q.tb.Helper()
	var leased []*delayq.Message
	for {
		ms, err := q.e.Lease(ctx, topic, delayq.LeaseRequest{Max: delayq.MaxBatch})
		if err != nil {
			q.tb.Fatalf("delayqtest: Work: lease from %s: %v", topic, err)
		}
		if len(ms) == 0 {
			break
		}
		leased = append(leased, ms...)
	}
	out := make([]Result, 0, len(leased))
	for _, m := range leased {
		err := handle(ctx, h, m)
		if err == nil {
			if aerr := q.e.Ack(ctx, topic, m.ID, m.Receipt); aerr != nil {
				q.tb.Fatalf("delayqtest: Work: ack %s/%s: %v", topic, m.ID, aerr)
			}
		} else if _, nerr := q.e.Nack(ctx, topic, m.ID, m.Receipt, delayq.NackRequest{Reason: err.Error()}); nerr != nil {
			q.tb.Fatalf("delayqtest: Work: nack %s/%s: %v", topic, m.ID, nerr)
		}
		out = append(out, Result{Message: m, Err: err})
	}
	return out
}

// handle runs h, turning a panic into an error as the Worker does.
func handle(ctx context.Context, h delayq.Handler, m *delayq.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return h.Handle(ctx, m)
}

// testLog writes the engine's log lines to the test log until the test's
// cleanup, after which testing forbids it.
type testLog struct {
	mu      sync.Mutex
	tb      testing.TB
	stopped bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.tb.Logf("delayq engine: %s", bytes.TrimRight(p, "\n"))
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}
