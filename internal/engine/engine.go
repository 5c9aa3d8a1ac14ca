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
//
// # Events
//
// The engine reports what it does as one stream of typed events (Event)
// to subscriptions (Config.Subscriptions, Subscribe): counting events for
// metrics and the dashboard's rates, message events for the dashboard's
// message histories, topic-settings changes for push delivery. Observers
// subscribe; nothing wraps the engine to watch it. Message events are
// built only when a subscription asks for them.
package engine

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// Built-in defaults for Config and topic settings.
const (
	DefaultMaxDelay    = domain.DefaultMaxDelay
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
var DefaultBackoff = domain.Backoff{Initial: time.Second, Max: time.Hour, Multiplier: 2, Jitter: 0.2}

// Config configures an Engine. The zero value of each field means its default.
type Config struct {
	// Store persists messages. Required.
	Store store.Store
	// Clock reads time. Default clock.Real{}.
	Clock clock.Clock
	// PreciseTimers arms a kernel timer (Linux timerfd) beside the timing
	// wheel's time.Timer, which in an otherwise idle process fires up to
	// 1 ms late, and arms both as much earlier as wake-ups are usually
	// late, spinning the rest (timingwheel.RunnerConfig.Precise). Servers
	// set it; never in a testing/synctest bubble, where time stands still
	// while the runner spins.
	PreciseTimers bool
	// Logger for background errors. Default slog.Default().
	Logger *slog.Logger
	// Subscriptions receive the engine's events from Open on (metrics,
	// the dashboard's recorder); more may come later with Subscribe.
	Subscriptions []Subscription
	// Defaults are topic settings for topics that set none; zero fields take
	// the built-in defaults (25 attempts, 30 s lease, backoff 1 s ×2 up to
	// 1 h with ±20 % jitter).
	Defaults domain.TopicSettings
	// MaxPayload bytes per message. Default domain.DefaultMaxPayload (1 MiB).
	// The engine is where it and MaxDelay are enforced (see Limits).
	MaxPayload int
	// MaxDelay is the furthest a message may be scheduled. Default 10 years.
	MaxDelay time.Duration
	// DedupWindow is how long an acked message's id still dedups sends.
	// Default 24 h.
	DedupWindow time.Duration
	// MaxTopics bounds the topics sends and SetTopicSettings may create
	// (see topicLimit); existing topics keep working. 0: no limit.
	MaxTopics int
	// SafetySweep is how often every topic is re-armed from the store, the
	// net under a lost notification or wake-up: a due message waits at
	// most this long for one. Default 5 s. Tests that must tell a lost
	// wake-up from a slow one set it long.
	SafetySweep time.Duration
}

// Engine implements domain.Queue on a store.Store. It is safe for concurrent use.
type Engine struct {
	st  store.Store
	clk clock.Clock
	// preciseTimers: Config.PreciseTimers, read when the dispatcher starts.
	preciseTimers bool
	log           *slog.Logger
	events        hub
	defaults      domain.TopicSettings
	limits        domain.Limits // MaxPayload and MaxDelay, defaults filled in
	dedup         time.Duration
	sweep         time.Duration // safety sweep period
	known         *topicLimit   // nil: no topic limit

	ids        domain.IDGenerator
	dispatcher *dispatcher
	gate       rateGate
	due        store.DueLeaser // nil: the store leases ready messages only
	// dueNext: the store's due lease reports the next due time, so the
	// timer leaves a release to the long-poll it wakes (promoter.go).
	dueNext store.NextDueLeaser
	// groupWrites: a topic's sends, and its acks, are grouped into one
	// store write while one is in flight (writegroup.go); for stores on
	// a server of their own, where every write is a round trip and a
	// commit.
	groupWrites bool
	skew        storeClock // offset to the store's clock (stores with their own)

	mu      sync.Mutex // guards lastNow, topics, and each topic's users and lastUsed
	lastNow int64
	topics  map[string]*topic

	// settingsEpoch counts SetTopicSettings calls, so that a sweep's
	// snapshot of the store, taken before a SetTopicSettings, does not
	// overwrite the newer settings it cached.
	settingsEpoch atomic.Uint64

	closing   chan struct{}
	closeOnce sync.Once
	bg        sync.WaitGroup
}

var (
	_ domain.Queue      = (*Engine)(nil)
	_ domain.TopicAdmin = (*Engine)(nil)
)

// Limits returns the payload and delay limits the engine enforces (Config's,
// defaults filled in), for a transport to size its bodies by.
func (e *Engine) Limits() domain.Limits { return e.limits }

// Open starts an engine on cfg.Store. It arms the dispatcher from the
// store's topics, so messages that came due while the process was down are
// released at once.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("engine: Config.Store is required")
	}
	e := &Engine{
		st:            cfg.Store,
		clk:           cmp.Or[clock.Clock](cfg.Clock, clock.Real{}),
		preciseTimers: cfg.PreciseTimers,
		log:           cmp.Or(cfg.Logger, slog.Default()),
		defaults:      fillSettings(cfg.Defaults, builtinSettings()),
		limits:        domain.Limits{MaxPayload: cfg.MaxPayload, MaxDelay: cfg.MaxDelay}.WithDefaults(),
		dedup:         cmp.Or(cfg.DedupWindow, DefaultDedupWindow),
		sweep:         cmp.Or(cfg.SafetySweep, sweepEvery),
		topics:        make(map[string]*topic),
		closing:       make(chan struct{}),
	}
	for _, s := range cfg.Subscriptions {
		e.events.subscribe(s)
	}
	if err := validateSettings(e.defaults); err != nil {
		return nil, fmt.Errorf("engine: default settings: %w", err)
	}
	switch {
	case cfg.MaxTopics < 0:
		return nil, errors.New("engine: MaxTopics must not be negative (0: no limit)")
	case cfg.MaxTopics > 0:
		e.known = newTopicLimit(cfg.MaxTopics)
	}
	e.gate = localGate{}
	if rl, ok := e.st.(store.RateLimiter); ok {
		e.gate = storeGate{rl: rl, events: &e.events}
	}
	if dl, ok := e.st.(store.DueLeaser); ok {
		e.due = dl
	}
	if nd, ok := e.st.(store.NextDueLeaser); ok && nd.ReportsNextDue() {
		e.dueNext = nd
	}
	_, e.groupWrites = e.st.(store.Pinger)
	if err := e.syncClock(ctx); err != nil {
		return nil, fmt.Errorf("engine: read the store's clock: %w", err)
	}
	e.dispatcher = newDispatcher(e)
	if err := e.recover(ctx); err != nil {
		e.dispatcher.stop()
		return nil, err
	}
	if err := e.armSchedules(ctx); err != nil {
		e.dispatcher.stop()
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
// It gives in-memory state only to topics that need it (scheduled
// messages to arm) or already have it: an idle topic costs no memory.
func (e *Engine) recover(ctx context.Context) error {
	epoch := e.settingsEpoch.Load()
	mark := e.known.begin()
	recs, err := e.st.TopicList(ctx)
	if err != nil {
		return fmt.Errorf("engine: list topics: %w", err)
	}
	e.known.refresh(recs, mark)
	for _, r := range recs {
		if r.NextLeaseExpiry != 0 {
			e.dispatcher.armExpire(r.NextLeaseExpiry)
		}
		t := e.lookup(r.Name)
		if t == nil && r.NextDue == 0 {
			continue // nobody here waits on it and nothing is to be armed
		}
		if t == nil {
			t = e.topic(r.Name)
		}
		e.refreshSettings(t, r.Settings, epoch)
		if r.NextDue != 0 {
			e.dispatcher.armPromote(t, r.NextDue)
		}
		if r.OldestReady != 0 {
			t.notify() // ready messages another engine may have promoted
		}
	}
	return nil
}

// Close stops background work and wakes long-polls, which answer
// ErrUnavailable. It does not close the store. It is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		close(e.closing)
		e.dispatcher.stop()
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

// Ready reports whether the store answers: a ping where the store has
// one (load balancers ask every few seconds, and a topic list reads every
// topic), else its topic list.
func (e *Engine) Ready(ctx context.Context) error {
	if e.isClosing() {
		return domain.ErrUnavailable
	}
	if p, ok := e.st.(store.Pinger); ok {
		if err := p.Ping(ctx); err != nil {
			return fmt.Errorf("%w: %v", domain.ErrUnavailable, err)
		}
		return nil
	}
	if _, err := e.st.TopicList(ctx); err != nil {
		return fmt.Errorf("%w: %v", domain.ErrUnavailable, err)
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
// dispatcher's bookkeeping. Created on first use; dropped by the safety
// sweep once idle (gcTopics), so that names nobody uses any more — a
// client long-polling random topic names, topics that were emptied —
// cost no memory.
type topic struct {
	name  string
	wheel uint64 // dispatcher (wheel) entry id
	// users counts long-polls holding the topic; lastUsed is the engine
	// time of the last lookup. Both guarded by Engine.mu.
	users    int
	lastUsed int64

	mu sync.Mutex
	// waiters are the long-polls registered for a wake-up (*waiter),
	// oldest first.
	waiters  list.List
	cached   *ownState // nil: not read yet
	setEpoch uint64    // settingsEpoch of the last SetTopicSettings here
	// throttledSince is the start of the current throttled period (engine
	// ms), 0 when the rate limit is not holding messages back.
	throttledSince int64

	limiter topicLimiter // the local bucket (localGate only)
	// busySkips counts grace promotions in a row the store answered
	// Busy (promoter.go).
	busySkips atomic.Int32
	// graceBy is when (engine ms) the timer next asks the store for a
	// grace promotion rather than leave a release to the long-poll it
	// woke (promoter.go); 0: not set.
	graceBy atomic.Int64

	// sends and acks wait here for the topic's write in flight
	// (writegroup.go).
	sends writeGroup[store.InsertMessage, store.InsertResult]
	acks  writeGroup[store.AckItem, error]
}

func (e *Engine) topic(name string) *topic {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.topicLocked(name, now)
}

func (e *Engine) topicLocked(name string, now int64) *topic {
	t := e.topics[name]
	if t == nil {
		t = &topic{name: name}
		t.wheel = e.dispatcher.register(t)
		e.topics[name] = t
	}
	t.lastUsed = now
	return t
}

// lookup returns the topic's state if it has any, without creating it.
func (e *Engine) lookup(name string) *topic {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.topics[name]
}

// acquire is topic for callers that hold it for long (long-polls): the
// topic is not dropped until release.
func (e *Engine) acquire(name string) *topic {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.topicLocked(name, now)
	t.users++
	return t
}

func (e *Engine) release(t *topic) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	t.users--
	t.lastUsed = now
}

// topicIdleAfter is how long a topic's state outlives its last use. Long
// enough that the short holders (a send or nack between its lookup and
// arming the topic's timer) are long done; a long-poll counts as a user.
const topicIdleAfter = 2 * time.Minute

// gcTopics drops the state of topics idle for topicIdleAfter: no
// long-poll, no timer armed or job pending, not looked up since. What it
// held is rebuilt on next use: settings are re-read from the store, a
// local rate limit's bucket starts full (as it would have refilled while
// idle), and the safety sweep re-arms any scheduled messages.
func (e *Engine) gcTopics() int {
	cutoff := e.now() - topicIdleAfter.Milliseconds()
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for name, t := range e.topics {
		if t.users > 0 || t.lastUsed > cutoff {
			continue
		}
		if !e.dispatcher.forgetIdle(t.wheel) {
			continue // armed or running: in use after all
		}
		delete(e.topics, name)
		n++
	}
	return n
}

// waiter is one long-poll's registration for a wake-up. A promotion wakes
// as many waiters as it made messages ready, not all of them: with N idle
// consumers, waking all made N store leases (each under the store's topic
// lock) for one message, N−1 of them empty, and the one that found it
// could queue behind the others.
type waiter struct {
	c  chan struct{} // buffered 1: holds the wake-up until it is taken
	el *list.Element // in topic.waiters; nil once woken
}

// waiter registers a long-poll for the next wake-up. Take it before
// trying to lease, so a wake-up in between is not lost, and hand it back
// with leave.
func (t *topic) waiter() *waiter {
	w := &waiter{c: make(chan struct{}, 1)}
	t.mu.Lock()
	w.el = t.waiters.PushBack(w)
	t.mu.Unlock()
	return w
}

// leave unregisters w. A wake-up sent to w that it did not wait for (its
// lease answered, timed out or was cancelled first) goes on to the next
// waiter: it may be the only one sent for a ready message. It reports
// whether such a wake-up found no waiter to go to.
func (t *topic) leave(w *waiter) (dropped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.el != nil {
		t.waiters.Remove(w.el)
		w.el = nil
		return false
	}
	select {
	case <-w.c:
		if t.waiters.Len() == 0 {
			return true
		}
		t.wakeLocked(1)
	default:
	}
	return false
}

// notify wakes every long-poll waiting on the topic: messages may have
// become ready, how many is not known here.
func (t *topic) notify() { t.notifyN(math.MaxInt) }

// notifyN wakes up to n long-polls, oldest first: n messages became ready.
func (t *topic) notifyN(n int) {
	t.mu.Lock()
	t.wakeLocked(n)
	t.mu.Unlock()
}

func (t *topic) wakeLocked(n int) {
	for ; n > 0; n-- {
		el := t.waiters.Front()
		if el == nil {
			return
		}
		w := t.waiters.Remove(el).(*waiter)
		w.el = nil
		w.c <- struct{}{} // never blocks: one wake-up per registration
	}
}

// wakeOne wakes the oldest waiting long-poll and reports whether there
// was one. A throttled topic's waiters wait for tokens, not messages: it
// wakes none.
func (t *topic) wakeOne() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiters.Len() == 0 || t.throttledSince != 0 {
		return false
	}
	t.wakeLocked(1)
	return true
}

// throttled reports whether the topic's rate limit holds messages back.
func (t *topic) throttled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.throttledSince != 0
}

// storeErr maps a store error to the public sentinels with a message that
// names what it is about ("message orders/42 not found"), keeping the cause.
func storeErr(op, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return &opError{msg: what + " not found", kind: domain.ErrNotFound, cause: err}
	case errors.Is(err, store.ErrBadCursor):
		return domain.Invalid("cursor", "is not one this server made")
	case errors.Is(err, store.ErrConflict):
		return &opError{msg: fmt.Sprintf("%s %s: %v", op, what, conflictReason(op)), kind: domain.ErrConflict, cause: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return &opError{msg: fmt.Sprintf("%s %s: storage unavailable: %v", op, what, err), kind: domain.ErrUnavailable, cause: err}
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

// msTime is an optional instant: 0 means unset.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
