package delayq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq"
)

func TestWorkerConcurrencyBound(t *testing.T) {
	t.Parallel()
	q := &recordingQueue{Queue: newEngine(t)}
	const n, limit = 30, 3
	for i := range n {
		mustSend(t, q, "jobs", fmt.Sprintf("m%02d", i), "x")
	}
	var active, peak atomic.Int32
	done := make(chan string, n)
	w := delayq.NewWorker(q, delayq.WorkerConfig{Concurrency: limit, Logger: quiet})
	w.HandleFunc("jobs", func(ctx context.Context, m *delayq.Message) error {
		cur := active.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // give the others a chance to overlap
		active.Add(-1)
		done <- m.ID
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range n {
		seen[<-done] = true
	}
	stopWorker(t, w)
	if len(seen) != n {
		t.Fatalf("%d distinct messages handled, want %d", len(seen), n)
	}
	if p := peak.Load(); p > limit || p < 1 {
		t.Fatalf("peak concurrency %d, limit %d", p, limit)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.leaseMax {
		if m < 1 || m > limit {
			t.Fatalf("leased up to %d at once with %d slots: %v", m, limit, q.leaseMax)
		}
	}
	for i := range n {
		if s := mustGet(t, q, "jobs", fmt.Sprintf("m%02d", i)).State; s != delayq.StateAcked {
			t.Fatalf("m%02d state %q after Stop, want acked", i, s)
		}
	}
}

// TestWorkerExtendsLeaseOfSlowHandler runs in a synctest bubble: time is
// virtual, so a loaded machine cannot make the 300 ms lease expire
// between extensions and turn this into a timing test.
func TestWorkerExtendsLeaseOfSlowHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &recordingQueue{Queue: newEngine(t)}
		mustSend(t, q, "slow", "s1", "x")
		var calls atomic.Int32
		finished := make(chan struct{})
		var once sync.Once
		w := delayq.NewWorker(q, delayq.WorkerConfig{Lease: 300 * time.Millisecond, Concurrency: 2, Logger: quiet})
		w.HandleFunc("slow", func(ctx context.Context, m *delayq.Message) error {
			calls.Add(1)
			select { // three leases' worth of work
			case <-time.After(time.Second):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			once.Do(func() { close(finished) })
			return nil
		})
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-finished
		stopWorker(t, w)
		m := mustGet(t, q, "slow", "s1")
		if m.State != delayq.StateAcked || m.Attempt != 1 || m.Failures != 0 || calls.Load() != 1 {
			t.Fatalf("state %q attempt %d failures %d handler calls %d: want acked after exactly one delivery",
				m.State, m.Attempt, m.Failures, calls.Load())
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.extends == 0 {
			t.Fatal("the lease was never extended")
		}
	})
}

func TestWorkerErrorNacksWithText(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	mustSend(t, q, "fail", "f1", "x")
	called := make(chan struct{})
	var reported atomic.Value
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet, ErrorHandler: func(_ context.Context, m *delayq.Message, err error) {
		reported.Store(m.ID + ": " + err.Error())
	}})
	var once sync.Once
	w.HandleFunc("fail", func(ctx context.Context, m *delayq.Message) error {
		once.Do(func() { close(called) })
		return errors.New("card declined")
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-called
	stopWorker(t, w) // waits for the nack
	m := mustGet(t, q, "fail", "f1")
	if m.LastError != "card declined" || m.Failures != 1 || m.State != delayq.StateScheduled {
		t.Fatalf("after error: state %q failures %d last error %q", m.State, m.Failures, m.LastError)
	}
	if got := reported.Load(); got != "f1: card declined" {
		t.Fatalf("ErrorHandler saw %v", got)
	}
}

func TestWorkerRecoversPanic(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	mustSend(t, q, "boom", "p1", "x")
	called := make(chan struct{})
	var once sync.Once
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet})
	w.HandleFunc("boom", func(ctx context.Context, m *delayq.Message) error {
		once.Do(func() { close(called) })
		var mp map[string]int
		//lint:ignore SA5000 a runtime panic (not panic()) is what the test needs
		mp["x"] = 1
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-called
	stopWorker(t, w)
	m := mustGet(t, q, "boom", "p1")
	if !strings.HasPrefix(m.LastError, "panic: assignment to entry in nil map") || m.Failures != 1 {
		t.Fatalf("after panic: failures %d last error %q", m.Failures, m.LastError)
	}
}

func TestWorkerStopWaitsForInflight(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	mustSend(t, q, "wait", "w1", "x")
	started, release := make(chan struct{}), make(chan struct{})
	var ctxErr atomic.Value
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet})
	w.HandleFunc("wait", func(ctx context.Context, m *delayq.Message) error {
		close(started)
		<-release
		ctxErr.Store(fmt.Sprint(ctx.Err()))
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started

	// A Stop whose ctx ends first reports it and cancels nothing.
	short, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Stop(short); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with a done ctx = %v", err)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a handler was running", err)
	default:
	}
	if s := mustGet(t, q, "wait", "w1").State; s != delayq.StateInflight {
		t.Fatalf("state %q while handling", s)
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if got := ctxErr.Load(); got != "<nil>" {
		t.Fatalf("handler ctx err %v: Stop must not cancel handlers", got)
	}
	if s := mustGet(t, q, "wait", "w1").State; s != delayq.StateAcked {
		t.Fatalf("state %q after Stop, want acked", s)
	}
	// Idempotent, in any order.
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.StopAndCancel(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerStopAndCancel(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	mustSend(t, q, "cancel", "c1", "x")
	started := make(chan struct{})
	var cause atomic.Value
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet})
	w.HandleFunc("cancel", func(ctx context.Context, m *delayq.Message) error {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return ctx.Err()
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := w.StopAndCancel(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, delayq.ErrWorkerStopped) {
		t.Fatalf("handler ctx cause %v", c)
	}
	m := mustGet(t, q, "cancel", "c1")
	if m.State != delayq.StateReady || m.Failures != 1 || m.LastError != "context canceled" {
		t.Fatalf("after StopAndCancel: state %q failures %d last error %q; want handed back (ready) at once", m.State, m.Failures, m.LastError)
	}
	if err := w.StopAndCancel(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerCancelsHandlerWhenLeaseLost(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	mustSend(t, q, "lost", "l1", "x")
	started := make(chan struct{})
	var cause atomic.Value
	w := delayq.NewWorker(q, delayq.WorkerConfig{Lease: 300 * time.Millisecond, Logger: quiet})
	w.HandleFunc("lost", func(ctx context.Context, m *delayq.Message) error {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return ctx.Err()
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	// The producer cancels the message while it is being handled: the
	// next extension finds it gone and the handler is told.
	if _, err := q.Cancel(context.Background(), "lost", "l1"); err != nil {
		t.Fatal(err)
	}
	stopWorker(t, w)
	if c, _ := cause.Load().(error); !errors.Is(c, delayq.ErrLeaseLost) {
		t.Fatalf("handler ctx cause %v, want ErrLeaseLost", c)
	}
	if _, err := q.Get(context.Background(), "lost", "l1"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("get after cancel: %v", err)
	}
}

func TestWorkerBatchesAcks(t *testing.T) {
	t.Parallel()
	q := &recordingQueue{Queue: newEngine(t)}
	const n = 40
	for i := range n {
		mustSend(t, q, "many", fmt.Sprintf("m%02d", i), "x")
	}
	var handled atomic.Int32
	all := make(chan struct{})
	w := delayq.NewWorker(q, delayq.WorkerConfig{Concurrency: 20, AckBatch: 10, AckFlush: time.Hour, Logger: quiet})
	w.HandleFunc("many", func(ctx context.Context, m *delayq.Message) error {
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-all
	eventually(t, "all acks flushed", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		sum := 0
		for _, b := range q.ackBatches {
			sum += b
		}
		return sum == n
	})
	stopWorker(t, w)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range q.ackBatches {
		if b != 10 { // AckFlush is an hour: only full batches go out
			t.Fatalf("ack batches %v, want batches of 10", q.ackBatches)
		}
	}
	if q.acks != 0 {
		t.Fatalf("%d single acks", q.acks)
	}
}

func TestWorkerStopFlushesPartialAckBatch(t *testing.T) {
	t.Parallel()
	q := &recordingQueue{Queue: newEngine(t)}
	mustSend(t, q, "one", "o1", "x")
	handled := make(chan struct{})
	w := delayq.NewWorker(q, delayq.WorkerConfig{AckFlush: time.Hour, Logger: quiet})
	w.HandleFunc("one", func(ctx context.Context, m *delayq.Message) error { close(handled); return nil })
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-handled
	stopWorker(t, w)
	if s := mustGet(t, q, "one", "o1").State; s != delayq.StateAcked {
		t.Fatalf("state %q: Stop must flush pending acks", s)
	}
}

type closeOrder struct{ closed chan string }

func (closeOrder) Topic() string { return "order-timeouts" }
func (c closeOrder) Execute(ctx context.Context, m *delayq.Message) error {
	c.closed <- string(m.Payload)
	return nil
}

func TestWorkerRegisterTaskAndMiddleware(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	mustSend(t, q, "order-timeouts", "o1", "order-1")
	var trace []string
	var mu sync.Mutex
	mw := func(name string) delayq.Middleware {
		return func(next delayq.Handler) delayq.Handler {
			return delayq.HandlerFunc(func(ctx context.Context, m *delayq.Message) error {
				mu.Lock()
				trace = append(trace, name)
				mu.Unlock()
				return next.Handle(ctx, m)
			})
		}
	}
	task := closeOrder{closed: make(chan string, 1)}
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet})
	w.Register(task)
	w.Use(mw("outer"), mw("inner"))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-task.closed; got != "order-1" {
		t.Fatalf("payload %q", got)
	}
	stopWorker(t, w)
	if strings.Join(trace, ",") != "outer,inner" {
		t.Fatalf("middleware order %v", trace)
	}
}

func TestWorkerRegistrationErrors(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet})
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("Start with no handlers succeeded")
	}
	nop := delayq.HandlerFunc(func(context.Context, *delayq.Message) error { return nil })
	for _, tc := range []struct {
		topic string
		h     delayq.Handler
	}{{"bad topic", nop}, {"ok", nil}} {
		if err := w.AddHandler(tc.topic, tc.h); err == nil {
			t.Errorf("AddHandler(%q, %v) succeeded", tc.topic, tc.h)
		}
	}
	if err := w.AddHandler("ok", nop); err != nil {
		t.Fatal(err)
	}
	if err := w.AddHandler("ok", nop); err == nil {
		t.Fatal("duplicate topic accepted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Handle with a duplicate topic did not panic")
			}
		}()
		w.Handle("ok", nop)
	}()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
	if err := w.AddHandler("late", nop); err == nil {
		t.Fatal("AddHandler after Start succeeded")
	}
	stopWorker(t, w)
}

func TestWorkerRunShutsDownOnCancel(t *testing.T) {
	t.Parallel()
	q := newEngine(t)
	mustSend(t, q, "run", "r1", "x")
	started, release := make(chan struct{}), make(chan struct{})
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet})
	w.HandleFunc("run", func(ctx context.Context, m *delayq.Message) error {
		close(started)
		<-release
		return ctx.Err() // nil: Run's ctx does not cancel handlers
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	<-started
	cancel()
	close(release)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if s := mustGet(t, q, "run", "r1").State; s != delayq.StateAcked {
		t.Fatalf("state %q", s)
	}
}
