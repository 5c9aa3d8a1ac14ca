package delayq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/wire"
)

// Handler processes one delivered message, like http.Handler serves one
// request. Returning nil acknowledges the message; returning an error nacks
// it with the error text as the reason, so it is retried after the topic's
// backoff or goes dead when its attempts are exhausted. SkipRetry(err)
// sends it to dead letters at once; RetryAfter(d, err) retries it after d
// instead of the backoff. A panic is recovered and treated as an error
// "panic: …".
//
// ctx is cancelled when the lease is lost (context.Cause(ctx) matches
// ErrLeaseLost: the message was cancelled, or the lease expired and the
// message may be handed to someone else) and by Worker.StopAndCancel
// (cause ErrWorkerStopped). Handlers must be safe for concurrent use: a
// Worker calls one Handler from up to Concurrency goroutines at once.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f(ctx, m).
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Task is a consumer that names its own topic: the shape of a consumer
// task in Java queue libraries. Register it with Worker.Register.
type Task interface {
	Topic() string
	Execute(ctx context.Context, m *Message) error
}

// TaskHandler adapts a Task to a Handler.
func TaskHandler(t Task) Handler { return HandlerFunc(t.Execute) }

// Middleware wraps a Handler, like net/http middleware: logging, metrics,
// tracing, timeouts. See Worker.Use.
type Middleware func(Handler) Handler

var (
	// ErrLeaseLost is the cause of a handler's context cancellation when
	// extending its lease failed with ErrConflict or ErrNotFound. The
	// worker neither acks nor nacks such a message: its receipt is stale.
	ErrLeaseLost = errors.New("delayq: lease lost")
	// ErrWorkerStopped is the cause of a handler's context cancellation
	// by Worker.StopAndCancel.
	ErrWorkerStopped = errors.New("delayq: worker stopped")
)

// WorkerConfig configures a Worker. The zero value means "all defaults".
type WorkerConfig struct {
	// Concurrency is how many handlers may run at once per topic.
	// Default 10. Ignored when SharedConcurrency is set.
	Concurrency int
	// SharedConcurrency, when > 0, makes the worker's topics share this
	// many handler slots instead of having Concurrency each: when they
	// compete, each topic gets slots in proportion to its weight
	// (HandlerWeight, default 1). It must be at least the number of topics
	// (every topic holds a slot while it long-polls).
	SharedConcurrency int
	// StrictPriority, with SharedConcurrency, serves the heaviest waiting
	// topic first instead of sharing by weight: lighter topics get slots
	// only when heavier ones have nothing to run.
	StrictPriority bool
	// HandlerTimeout bounds every handler call (see the HandlerTimeout option, which
	// overrides it per topic). 0: no bound; the lease is extended as long
	// as the handler runs.
	HandlerTimeout time.Duration
	// Lease is the lease asked for each message; the worker extends it
	// while the handler runs. Default 30s.
	Lease time.Duration
	// Wait is how long one lease request long-polls when nothing is ready.
	// Default and maximum: MaxWait (30s).
	Wait time.Duration
	// BatchSize caps the messages asked for in one lease request; the
	// worker never asks for more than it has free slots. Default and
	// maximum: Concurrency.
	BatchSize int
	// ExtendEvery is how often a running handler's lease is extended (to
	// now+Lease). Default Lease/3; negative disables extension.
	ExtendEvery time.Duration
	// AckBatch is how many acks are sent in one AckBatch call; acks wait
	// up to AckFlush for the batch to fill, and on a queue that acks with
	// a lease (AckLeaser: Client) the worker's next lease takes what
	// waits, one call instead of two. Default 100 (max MaxBatch); 1 sends
	// each ack on its own with Ack as soon as the handler returns.
	AckBatch int
	// AckFlush is the longest an ack waits for its batch to fill.
	// Default 100ms or Lease/10, whichever is shorter.
	AckFlush time.Duration
	// ShutdownTimeout is how long Run lets in-flight handlers finish after
	// its context is cancelled, before cancelling them. Default 30s.
	ShutdownTimeout time.Duration
	// Logger receives lease, ack and nack failures, handler errors and
	// panics (with stack). Default slog.Default().
	Logger *slog.Logger
	// ErrorHandler, if set, is called after a handler returns an error or
	// panics, before the message is nacked. It is called concurrently.
	ErrorHandler func(ctx context.Context, m *Message, err error)
	// TracerProvider, if set, gives every handler call a span, in the
	// handler's ctx ("process TOPIC", kind consumer, a new trace), linked
	// to the span that sent the message when the message's "traceparent"
	// header names one (the Client and the server add it when tracing):
	// the trace survives the delay. Pass otel.GetTracerProvider() for the
	// global one. Nil (the default): no spans, at no cost.
	TracerProvider trace.TracerProvider
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.Concurrency <= 0 {
		c.Concurrency = 10
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.Wait <= 0 || c.Wait > MaxWait {
		c.Wait = MaxWait
	}
	if c.BatchSize <= 0 || c.BatchSize > c.Concurrency {
		c.BatchSize = c.Concurrency
	}
	if c.SharedConcurrency > 0 {
		c.BatchSize = min(c.BatchSize, c.SharedConcurrency)
	}
	c.BatchSize = min(c.BatchSize, MaxBatch)
	if c.ExtendEvery == 0 {
		c.ExtendEvery = c.Lease / 3
	}
	if c.AckBatch <= 0 {
		c.AckBatch = 100
	}
	c.AckBatch = min(c.AckBatch, MaxBatch)
	if c.AckFlush <= 0 {
		c.AckFlush = min(100*time.Millisecond, c.Lease/10)
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// callTimeout bounds the worker's own ack, nack and extend calls, which
// run on a context that outlives shutdown.
const callTimeout = 10 * time.Second

// Worker leases messages of its topics from a Queue and runs their
// handlers, with bounded concurrency per topic, lease extension, batched
// acks and graceful shutdown.
//
// Register handlers (Handle, HandleFunc, Register, AddHandler) and
// middleware (Use) before Start; then Start, and finally Stop or
// StopAndCancel. The methods are safe for concurrent use. Every goroutine
// a Worker starts has ended when Stop or StopAndCancel returns nil.
type Worker struct {
	q   Queue
	cfg WorkerConfig

	mu       sync.Mutex // guards the fields below until Start
	handlers map[string]registered
	mws      []Middleware
	started  bool

	tracer trace.Tracer // nil: no spans

	// Set by Start, read-only afterwards.
	bg             context.Context // values of Start's ctx, never cancelled
	handlerCtx     context.Context // parent of handler contexts
	stopLeasing    context.CancelFunc
	cancelHandlers context.CancelCauseFunc
	done           chan struct{} // closed when every goroutine has ended
}

// registered is a topic's handler with its options.
type registered struct {
	h    Handler
	opts handlerOptions
}

// NewWorker returns a Worker consuming from q (an engine or a Client).
func NewWorker(q Queue, cfg WorkerConfig) *Worker {
	w := &Worker{q: q, cfg: cfg.withDefaults(), handlers: map[string]registered{}}
	if cfg.TracerProvider != nil {
		w.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	return w
}

// tracerName is the instrumentation scope of the Worker's spans.
const tracerName = "github.com/delayq/delayq"

// Handle registers h for topic, with options (HandlerTimeout, HandlerWeight).
// It panics on an invalid topic or option, a nil handler, a topic
// registered twice, or a call after Start: programmer errors, found at
// start-up. AddHandler is the non-panicking variant.
func (w *Worker) Handle(topic string, h Handler, opts ...HandlerOption) {
	if err := w.AddHandler(topic, h, opts...); err != nil {
		panic(err)
	}
}

// HandleFunc registers f for topic, like Handle.
func (w *Worker) HandleFunc(topic string, f func(ctx context.Context, m *Message) error, opts ...HandlerOption) {
	w.Handle(topic, HandlerFunc(f), opts...)
}

// Register registers t for t.Topic(), like Handle.
func (w *Worker) Register(t Task, opts ...HandlerOption) {
	w.Handle(t.Topic(), TaskHandler(t), opts...)
}

// AddHandler registers h for topic, or returns why it cannot.
func (w *Worker) AddHandler(topic string, h Handler, opts ...HandlerOption) error {
	if err := ValidateTopic(topic); err != nil {
		return fmt.Errorf("delayq: worker: %w", err)
	}
	if h == nil {
		return fmt.Errorf("delayq: worker: nil handler for topic %q", topic)
	}
	o := handlerOptions{timeout: w.cfg.HandlerTimeout, weight: 1}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.timeout < 0:
		return fmt.Errorf("delayq: worker: topic %q: timeout %s is negative", topic, o.timeout)
	case o.weight < 1:
		return fmt.Errorf("delayq: worker: topic %q: weight %d, want at least 1", topic, o.weight)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.started:
		return fmt.Errorf("delayq: worker: handler for topic %q added after Start", topic)
	case w.handlers[topic].h != nil:
		return fmt.Errorf("delayq: worker: topic %q already has a handler", topic)
	}
	w.handlers[topic] = registered{h: h, opts: o}
	return nil
}

// Use appends middleware applied to every handler; the first one given is
// the outermost. It panics after Start.
func (w *Worker) Use(mw ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("delayq: worker: Use after Start")
	}
	w.mws = append(w.mws, mw...)
}

// Start begins leasing and handling in background goroutines and returns.
// Handlers' contexts derive from ctx: cancelling it cancels running
// handlers and stops leasing, like StopAndCancel; call Stop or
// StopAndCancel to wait for the goroutines to end. Start fails if the
// worker has no handlers or was started before.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("delayq: worker: already started")
	}
	if len(w.handlers) == 0 {
		return errors.New("delayq: worker: no handlers registered")
	}
	var pool *slotPool
	if n := w.cfg.SharedConcurrency; n > 0 {
		if n < len(w.handlers) {
			return fmt.Errorf("delayq: worker: SharedConcurrency %d is less than the %d topics (each holds a slot while it waits for messages)", n, len(w.handlers))
		}
		pool = newSlotPool(n, w.cfg.StrictPriority)
	}
	w.started = true
	w.bg = context.WithoutCancel(ctx)
	w.handlerCtx, w.cancelHandlers = context.WithCancelCause(ctx)
	leaseCtx, stopLeasing := context.WithCancel(w.handlerCtx)
	w.stopLeasing = stopLeasing
	w.done = make(chan struct{})

	topics := make([]string, 0, len(w.handlers))
	for t := range w.handlers {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	runners := make([]*topicRunner, len(topics))
	var fetchers, ackers sync.WaitGroup
	for i, t := range topics {
		r := w.newRunner(t, w.handlers[t], pool)
		runners[i] = r
		fetchers.Go(func() { r.fetchLoop(leaseCtx) })
		if r.acks != nil {
			ackers.Go(r.ackLoop)
		}
	}
	// The supervisor ends everything in order: no more leases, then no
	// more handlers (so no more acks), then the last ack flush.
	go func() {
		fetchers.Wait()
		for _, r := range runners {
			r.handlers.Wait() // safe: only fetchLoop calls handlers.Add, and it has returned
		}
		for _, r := range runners {
			if r.acks != nil {
				close(r.acks)
			}
		}
		ackers.Wait()
		w.cancelHandlers(ErrWorkerStopped) // releases the contexts; nothing runs any more
		close(w.done)
	}()
	return nil
}

// Run starts the worker and blocks until ctx is cancelled, then shuts down
// gracefully: it stops leasing and lets in-flight handlers finish for up to
// ShutdownTimeout, then cancels the rest (as StopAndCancel does) and waits
// up to ShutdownTimeout again. Handler contexts are not cancelled by ctx.
// It returns nil after a clean shutdown, or earlier when Stop or
// StopAndCancel was called from elsewhere.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-w.done:
		return nil
	}
	bg := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(bg, w.cfg.ShutdownTimeout)
	defer cancel()
	if w.Stop(sctx) == nil {
		return nil
	}
	cctx, cancel2 := context.WithTimeout(bg, w.cfg.ShutdownTimeout)
	defer cancel2()
	return w.StopAndCancel(cctx)
}

// Stop stops leasing and waits for in-flight handlers to finish and for
// their acks and nacks to be sent. If ctx ends first it returns ctx.Err()
// and the handlers keep running; call StopAndCancel to cancel them. Stop
// is idempotent, and a no-op before Start.
func (w *Worker) Stop(ctx context.Context) error {
	if !w.begin() {
		return nil
	}
	w.stopLeasing()
	return w.wait(ctx)
}

// StopAndCancel stops leasing, cancels the contexts of running handlers
// (cause ErrWorkerStopped) and waits for them to return. A handler that
// returns nil is acked; one that returns an error is nacked with no delay
// ("retry now", counted as a failure), so another consumer takes the
// message at once instead of after its lease expires. If ctx ends first it
// returns ctx.Err(): handlers ignoring cancellation are still running and
// their messages will be redelivered when their leases expire.
// StopAndCancel is idempotent, and a no-op before Start.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	if !w.begin() {
		return nil
	}
	w.stopLeasing()
	w.cancelHandlers(ErrWorkerStopped)
	return w.wait(ctx)
}

// begin reports whether the worker was started.
func (w *Worker) begin() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started
}

func (w *Worker) wait(ctx context.Context) error {
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Worker) newRunner(topic string, reg registered, pool *slotPool) *topicRunner {
	h := reg.h
	for i := len(w.mws) - 1; i >= 0; i-- {
		h = w.mws[i](h)
	}
	r := &topicRunner{w: w, cfg: &w.cfg, topic: topic, h: h, timeout: reg.opts.timeout}
	if pool != nil {
		r.slots = pool.join(reg.opts.weight)
	} else {
		r.slots = make(ownSlots, w.cfg.Concurrency)
	}
	if w.cfg.AckBatch > 1 {
		r.acks = make(chan AckRequest, w.cfg.AckBatch)
		if al, ok := w.q.(AckLeaser); ok {
			r.leaser = al
			r.take, r.taken = make(chan chan []AckRequest), make(chan []AckRequest, 1)
		}
	}
	return r
}

// topicRunner consumes one topic. fetchLoop holds a slot per message it
// leases; each message's goroutine gives its slot back when the message
// has been acked (or queued for a batch ack) or nacked.
type topicRunner struct {
	w       *Worker
	cfg     *WorkerConfig
	topic   string
	h       Handler
	timeout time.Duration // per handler call; 0: none

	slots    slots           // one per running handler
	acks     chan AckRequest // to ackLoop; nil when AckBatch is 1
	handlers sync.WaitGroup  // message goroutines

	// With a queue that acks and leases in one call, fetchLoop asks
	// ackLoop for its waiting batch (take, answered on taken) and sends
	// it with the lease. Both nil otherwise.
	leaser     AckLeaser
	take       chan chan []AckRequest
	taken      chan []AckRequest
	noAckLease bool // the server refused acks with a lease; fetchLoop's alone
}

func (r *topicRunner) log() *slog.Logger { return r.cfg.Logger }

// fetchLoop leases as many messages as there are free slots (at least one,
// at most BatchSize) and starts a goroutine per message, until ctx ends.
func (r *topicRunner) fetchLoop(ctx context.Context) {
	failures := 0
	for {
		n := r.slots.acquire(ctx, r.cfg.BatchSize)
		if n == 0 {
			return
		}
		start := time.Now()
		msgs, err := r.lease(ctx, LeaseRequest{Max: n, Lease: r.cfg.Lease, Wait: r.cfg.Wait})
		if ps, ok := r.slots.(*poolSlots); ok && err == nil {
			ps.leased(n, len(msgs))
		}
		r.slots.release(n - len(msgs))
		if err != nil {
			// When ctx ended, a lease the server granted but we did not
			// receive is given back by the server when it sees the
			// request gone (due again at once); one it had already
			// answered expires and the message is redelivered.
			if ctx.Err() != nil {
				return
			}
			failures++
			d := min(100*time.Millisecond<<min(failures, 7), 10*time.Second)
			r.log().Error("delayq worker: lease failed", "topic", r.topic, "err", err, "retry_in", d)
			if !sleepCtx(ctx, d) {
				return
			}
			continue
		}
		failures = 0
		for _, m := range msgs {
			r.handlers.Add(1)
			go r.process(m, start)
		}
		// Guard against a queue that answers "nothing" at once instead of
		// long-polling: never spin.
		if len(msgs) == 0 && time.Since(start) < 50*time.Millisecond && !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// lease leases for fetchLoop, with the acks waiting for their batch when
// the queue takes acks with a lease.
func (r *topicRunner) lease(ctx context.Context, req LeaseRequest) ([]*Message, error) {
	acks := r.takeAcks()
	if len(acks) == 0 {
		return r.w.q.Lease(ctx, r.topic, req)
	}
	msgs, errs, err := r.leaser.AckAndLease(ctx, r.topic, acks, req)
	if err != nil {
		// Carried out or not, nobody can tell: send them again (an ack
		// repeated with its receipt answers ok).
		r.flush(acks)
		if errors.Is(err, ErrAcksWithLeaseUnsupported) {
			// Acks go in calls of their own from now on.
			r.log().Info("delayq worker: the server does not take acks with a lease; acks are sent apart", "topic", r.topic)
			r.noAckLease = true
			return r.w.q.Lease(ctx, r.topic, req)
		}
		return nil, err
	}
	r.logAckErrors(acks, errs)
	return msgs, nil
}

// takeAcks takes ackLoop's waiting batch, if ackLoop is free to hand it
// over now (not while it sends one), else nothing.
func (r *topicRunner) takeAcks() []AckRequest {
	if r.take == nil || r.noAckLease {
		return nil
	}
	select {
	case r.take <- r.taken:
		return <-r.taken
	default:
		return nil
	}
}

// process runs the handler for m with lease extension, then acks or nacks.
// leasedAt is when the Lease call began: the lease cannot have started
// earlier, so extending relative to it is safe however slow the answer was.
func (r *topicRunner) process(m *Message, leasedAt time.Time) {
	defer r.handlers.Done()
	defer r.slots.release(1)
	ctx, cancel := context.WithCancelCause(r.w.handlerCtx)
	defer cancel(nil)
	var span trace.Span
	if r.w.tracer != nil {
		ctx, span = r.startSpan(ctx, m)
	}
	stopExtending := r.startExtender(m, leasedAt, cancel)
	callCtx := ctx
	if r.timeout > 0 {
		// Past the timeout the lease is no longer extended: a handler that
		// ignores its context then loses the message to a redelivery
		// instead of holding it for ever.
		var cancelT context.CancelFunc
		callCtx, cancelT = context.WithTimeoutCause(ctx, r.timeout, ErrHandlerTimeout)
		defer cancelT()
		stop := context.AfterFunc(callCtx, func() {
			if errors.Is(context.Cause(callCtx), ErrHandlerTimeout) {
				stopExtending()
			}
		})
		defer stop()
	}
	err := r.call(callCtx, m)
	if err != nil && errors.Is(context.Cause(callCtx), ErrHandlerTimeout) && !errors.Is(err, ErrHandlerTimeout) {
		err = fmt.Errorf("%w after %s: %w", ErrHandlerTimeout, r.timeout, err)
	}
	stopExtending()
	if span != nil {
		endSpan(ctx, span, err)
	}
	r.finish(ctx, m, err)
}

// startSpan starts the handler's span: a new trace (the Worker's own
// context is not the message's cause), linked to the sender's span when
// the message names one. The messaging semantic conventions recommend a
// link rather than a parent for work done long after the send.
func (r *topicRunner) startSpan(ctx context.Context, m *Message) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "delayq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", r.topic),
			attribute.String("messaging.message.id", m.ID),
			attribute.Int("messaging.delayq.attempt", m.Attempt),
		),
	}
	if sc := wire.TraceparentSpanContext(m.Headers); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return r.w.tracer.Start(ctx, "process "+r.topic, opts...)
}

// endSpan records the handler's outcome: its error, or the lost lease.
func endSpan(ctx context.Context, span trace.Span, err error) {
	if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
		span.SetAttributes(attribute.Bool("messaging.delayq.lease_lost", true))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, truncateUTF8(err.Error(), 1000))
	}
	span.End()
}

// call runs the handler, turning a panic into an error.
func (r *topicRunner) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			r.log().Error("delayq worker: handler panicked", "topic", r.topic, "id", m.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	return r.h.Handle(ctx, m)
}

// startExtender extends m's lease ExtendEvery after the lease (or the
// previous extension) was asked for, until the returned function is called
// (which waits for the extender to end). When the lease is gone (conflict:
// expired and redelivered; not found: cancelled or acked elsewhere) it
// cancels the handler with ErrLeaseLost.
func (r *topicRunner) startExtender(m *Message, leasedAt time.Time, cancelHandler context.CancelCauseFunc) (stop func()) {
	if r.cfg.ExtendEvery < 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(r.w.bg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		next := leasedAt.Add(r.cfg.ExtendEvery)
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			asked := time.Now()
			_, err := r.w.q.Extend(ctx, r.topic, m.ID, m.Receipt, r.cfg.Lease)
			switch {
			case err == nil:
				next = asked.Add(r.cfg.ExtendEvery)
			case ctx.Err() != nil:
				return
			case errors.Is(err, ErrConflict), errors.Is(err, ErrNotFound):
				cancelHandler(fmt.Errorf("%w: extend: %w", ErrLeaseLost, err))
				return
			default:
				// Transient: retry soon, while the last lease still runs.
				next = time.Now().Add(min(r.cfg.ExtendEvery, time.Second))
				r.log().Warn("delayq worker: extend lease failed", "topic", r.topic, "id", m.ID, "err", err)
			}
			t.Reset(time.Until(next))
		}
	}()
	return func() { cancel(); <-done }
}

// finish acks or nacks m after its handler returned err.
func (r *topicRunner) finish(ctx context.Context, m *Message, err error) {
	if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
		r.log().Warn("delayq worker: lease lost while handling; not acking", "topic", r.topic, "id", m.ID, "cause", cause, "handler_err", err)
		return
	}
	if err == nil {
		r.ack(m)
		return
	}
	if r.cfg.ErrorHandler != nil {
		r.cfg.ErrorHandler(ctx, m, err)
	}
	req := nackFor(err)
	if r.w.handlerCtx.Err() != nil && !req.Dead {
		// Shutting down: hand the message back for someone else right away.
		req.HasDelay, req.Delay = true, 0
	}
	r.log().Info("delayq worker: handler failed; nacking", "topic", r.topic, "id", m.ID, "attempt", m.Attempt, "err", err)
	cctx, cancel := context.WithTimeout(r.w.bg, callTimeout)
	defer cancel()
	if _, nerr := r.w.q.Nack(cctx, r.topic, m.ID, m.Receipt, req); nerr != nil {
		r.log().Error("delayq worker: nack failed; the message is redelivered when its lease expires", "topic", r.topic, "id", m.ID, "err", nerr)
	}
}

func (r *topicRunner) ack(m *Message) {
	if r.acks != nil {
		r.acks <- AckRequest{ID: m.ID, Receipt: m.Receipt} // ackLoop runs until every process has returned
		return
	}
	ctx, cancel := context.WithTimeout(r.w.bg, callTimeout)
	defer cancel()
	if err := r.w.q.Ack(ctx, r.topic, m.ID, m.Receipt); err != nil {
		r.log().Error("delayq worker: ack failed; the message may be redelivered", "topic", r.topic, "id", m.ID, "err", err)
	}
}

// ackLoop sends queued acks in batches of up to AckBatch, each at most
// AckFlush after its first ack was queued, until r.acks is closed; or
// hands its batch to fetchLoop to go with a lease (take).
func (r *topicRunner) ackLoop() {
	var batch []AckRequest
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case a, ok := <-r.acks:
			if !ok {
				r.flush(batch)
				return
			}
			batch = append(batch, a)
			if len(batch) == 1 {
				timer.Reset(r.cfg.AckFlush)
			}
			if len(batch) >= r.cfg.AckBatch {
				timer.Stop()
				r.flush(batch)
				batch = nil
			}
		case <-timer.C:
			r.flush(batch)
			batch = nil
		case reply := <-r.take: // nil channel without a leaser: never ready
			timer.Stop()
			reply <- batch
			batch = nil
		}
	}
}

func (r *topicRunner) flush(batch []AckRequest) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.w.bg, callTimeout)
	defer cancel()
	errs, err := r.w.q.AckBatch(ctx, r.topic, batch)
	if err != nil {
		r.log().Error("delayq worker: batch ack failed; the messages may be redelivered", "topic", r.topic, "count", len(batch), "err", err)
		return
	}
	r.logAckErrors(batch, errs)
}

func (r *topicRunner) logAckErrors(batch []AckRequest, errs []error) {
	for i, e := range errs {
		if e != nil {
			r.log().Warn("delayq worker: ack failed; the message may be redelivered", "topic", r.topic, "id", batch[i].ID, "err", e)
		}
	}
}

// sleepCtx waits d, or less if ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
