// Package engine is the broker core of delayq: it validates requests, owns
// scheduling (a timing wheel armed with each topic's next due time), leases,
// retries with backoff, dead letters, idempotent sends and stats, on top of
// any store.Store. It never imports net/http or Prometheus.
//
// # Time
//
// Engine time is the injected clock's wall time in Unix milliseconds, made
// non-decreasing: if the wall clock steps back, engine time holds until the
// wall clock catches up. Messages are then late by at most the step, never
// early, because promotion compares due times with engine time only.
//
// # Scheduling
//
// Each topic has one wheel entry: the due time of its earliest scheduled
// message. When it fires, the promoter moves every due message to ready in
// one store operation per 1000 messages (atomic in the store, R4), re-arms
// the entry at the store's next due time and wakes the topic's long-polls.
// Memory is therefore O(topics), not O(pending messages): messages far in
// the future, and payloads, stay in the store.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/store"
)

// Built-in defaults for Config and topic settings.
const (
	DefaultMaxDelay    = 10 * 365 * 24 * time.Hour
	DefaultDedupWindow = 24 * time.Hour
	DefaultLease       = 30 * time.Second
	DefaultMaxAttempts = 25
	MaxLease           = 12 * time.Hour
	MaxMaxAttempts     = 1000

	promoteBatch = 1000
	expireBatch  = 1000
	purgeBatch   = 10000
)

// DefaultBackoff is the retry policy of topics that set none.
var DefaultBackoff = delayq.Backoff{Initial: time.Second, Max: time.Hour, Multiplier: 2, Jitter: 0.2}

// Config configures an Engine. The zero value of each field means its default.
type Config struct {
	// Store persists messages. Required.
	Store store.Store
	// Clock reads time. Default clock.Real{}.
	Clock clock.Clock
	// Logger for background errors. Default slog.Default().
	Logger *slog.Logger
	// Observer receives events for metrics. Default NopObserver.
	Observer Observer
	// Defaults are topic settings for topics that set none; zero fields take
	// the built-in defaults (25 attempts, 30 s lease, backoff 1 s ×2 up to
	// 1 h with ±20 % jitter).
	Defaults delayq.TopicSettings
	// MaxPayload bytes per message. Default delayq.DefaultMaxPayload (1 MiB).
	MaxPayload int
	// MaxDelay is the furthest a message may be scheduled. Default 10 years.
	MaxDelay time.Duration
	// DedupWindow is how long an acked message's id still dedups sends.
	// Default 24 h.
	DedupWindow time.Duration

	sweepEvery time.Duration // the safety sweep's period; tests shorten it
}

// Engine implements delayq.Queue on a store.Store. It is safe for concurrent use.
type Engine struct {
	st       store.Store
	clk      clock.Clock
	log      *slog.Logger
	obs      Observer
	defaults delayq.TopicSettings
	maxPay   int
	maxDelay time.Duration
	dedup    time.Duration
	sweep    time.Duration // safety sweep period

	ids   idGen
	sched *scheduler
	gate  rateGate
	skew  storeClock // offset to the store's clock (stores with their own)

	mu      sync.Mutex // guards lastNow, topics
	lastNow int64
	topics  map[string]*topic

	closing   chan struct{}
	closeOnce sync.Once
	bg        sync.WaitGroup
}

var _ delayq.Queue = (*Engine)(nil)

// Open starts an engine on cfg.Store. It arms the scheduler from the
// store's topics, so messages that came due while the process was down are
// released at once.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("engine: Config.Store is required")
	}
	e := &Engine{
		st:       cfg.Store,
		clk:      cmpOr[clock.Clock](cfg.Clock, clock.Real{}),
		log:      cmpOr(cfg.Logger, slog.Default()),
		obs:      cmpOr[Observer](cfg.Observer, NopObserver{}),
		defaults: fillSettings(cfg.Defaults, builtinSettings()),
		maxPay:   cmpOr(cfg.MaxPayload, delayq.DefaultMaxPayload),
		maxDelay: cmpOr(cfg.MaxDelay, DefaultMaxDelay),
		dedup:    cmpOr(cfg.DedupWindow, DefaultDedupWindow),
		sweep:    cmpOr(cfg.sweepEvery, sweepEvery),
		topics:   make(map[string]*topic),
		closing:  make(chan struct{}),
	}
	if err := validateSettings(e.defaults); err != nil {
		return nil, fmt.Errorf("engine: default settings: %w", err)
	}
	e.gate = localGate{}
	if rl, ok := e.st.(store.RateLimiter); ok {
		e.gate = storeGate{rl: rl, obs: e.obs}
	}
	if err := e.syncClock(ctx); err != nil {
		return nil, fmt.Errorf("engine: read the store's clock: %w", err)
	}
	e.sched = newScheduler(e)
	if err := e.recover(ctx); err != nil {
		e.sched.stop()
		return nil, err
	}
	if err := e.armSchedules(ctx); err != nil {
		e.sched.stop()
		return nil, err
	}
	e.bg.Add(2)
	go e.runJanitor()       // #nosec G118 -- engine-lifetime loop, not request-scoped: Close stops it through e.closing
	go e.runScheduleSweep() // #nosec G118 -- engine-lifetime loop, not request-scoped: Close stops it through e.closing
	if n, ok := e.st.(store.Notifier); ok {
		e.startNotifier(n) // starts the safety sweep too
	} else {
		e.startSweep()
	}
	return e, nil
}

// recover arms every known topic's promotion and the lease expiry sweep.
func (e *Engine) recover(ctx context.Context) error {
	recs, err := e.st.TopicList(ctx)
	if err != nil {
		return fmt.Errorf("engine: list topics: %w", err)
	}
	for _, r := range recs {
		t := e.topic(r.Name)
		e.refreshSettings(t, r.Settings)
		if r.NextDue != 0 {
			e.sched.armPromote(t, r.NextDue)
		}
		if r.OldestReady != 0 {
			t.notify() // ready messages another engine may have promoted
		}
		if r.NextLeaseExpiry != 0 {
			e.sched.armExpire(r.NextLeaseExpiry)
		}
	}
	return nil
}

// Close stops background work and wakes long-polls, which answer
// ErrUnavailable. It does not close the store. It is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		close(e.closing)
		e.sched.stop()
	})
	done := make(chan struct{})
	go func() { e.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ready reports whether the store answers.
func (e *Engine) Ready(ctx context.Context) error {
	if e.isClosing() {
		return delayq.ErrUnavailable
	}
	if _, err := e.st.TopicList(ctx); err != nil {
		return fmt.Errorf("%w: %v", delayq.ErrUnavailable, err)
	}
	return nil
}

func (e *Engine) isClosing() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}

// now is engine time in Unix ms, never decreasing (see the package doc).
func (e *Engine) now() int64 {
	t := e.clk.Now().UnixMilli()
	e.mu.Lock()
	defer e.mu.Unlock()
	if t < e.lastNow {
		return e.lastNow
	}
	e.lastNow = t
	return t
}

// topic state kept in memory: the wake-up channel of long-polls and the
// scheduler's bookkeeping. Created on first use; never removed (topics are few).
type topic struct {
	name   string
	wheel  uint64 // scheduler entry id
	mu     sync.Mutex
	wake   chan struct{} // closed and replaced when messages may have become ready
	cached *delayq.TopicSettings
	// throttledSince is the start of the current throttled period (engine
	// ms), 0 when the rate limit is not holding messages back.
	throttledSince int64

	limiter topicLimiter // the local bucket (localGate only)
}

func (e *Engine) topic(name string) *topic {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.topics[name]
	if t == nil {
		t = &topic{name: name, wake: make(chan struct{})}
		t.wheel = e.sched.register(t)
		e.topics[name] = t
	}
	return t
}

// waiter returns the channel that the next wake-up closes. Take it before
// trying to lease, so a wake-up in between is not lost.
func (t *topic) waiter() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wake
}

// notify wakes every long-poll waiting on the topic.
func (t *topic) notify() {
	t.mu.Lock()
	close(t.wake)
	t.wake = make(chan struct{})
	t.mu.Unlock()
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// storeErr maps a store error to the public sentinels with a message that
// names what it is about ("message orders/42 not found"), keeping the cause.
func storeErr(op, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return &opError{msg: what + " not found", kind: delayq.ErrNotFound, cause: err}
	case errors.Is(err, store.ErrConflict):
		return &opError{msg: fmt.Sprintf("%s %s: %v", op, what, conflictReason(op)), kind: delayq.ErrConflict, cause: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return &opError{msg: fmt.Sprintf("%s %s: storage unavailable: %v", op, what, err), kind: delayq.ErrUnavailable, cause: err}
	}
}

func conflictReason(op string) string {
	switch op {
	case "ack", "nack", "extend":
		return "the receipt is not the current lease's (the lease expired and the message was handed out again, or it was acked)"
	case "reschedule":
		return "only scheduled or ready messages can be rescheduled"
	case "cancel":
		return "dead or acked messages cannot be cancelled"
	}
	return "the message's state forbids it"
}

// opError is an engine error with a message for humans that matches one
// public sentinel with errors.Is.
type opError struct {
	msg   string
	kind  error
	cause error
}

func (e *opError) Error() string        { return e.msg }
func (e *opError) Is(target error) bool { return target == e.kind }
func (e *opError) Unwrap() error        { return e.cause }

func msgRef(topic, id string) string { return "message " + topic + "/" + id }

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
