package delayqtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/delayqtest"
)

// closeOrder is the handler under test: it closes the order named by the
// payload.
func closeOrder(ctx context.Context, m *delayq.Message) error {
	fmt.Println("closing", string(m.Payload))
	return nil
}

// A test sends a message due in 30 minutes and moves the clock: at 29
// minutes nothing can be leased, at 30 the message is, and the test runs
// its handler on it. No real time passes.
func Example() {
	t := newExampleT() // in a test: the *testing.T
	defer t.finish()
	ctx := context.Background()

	q := delayqtest.NewQueue(t)
	if _, err := q.Send(ctx, "order-timeouts", delayq.NewSendRequest([]byte("order-42"),
		delayq.After(30*time.Minute), delayq.WithID("timeout-order-42"))); err != nil {
		panic(err)
	}

	q.Advance(29 * time.Minute)
	ms, _ := q.Lease(ctx, "order-timeouts", delayq.LeaseRequest{})
	fmt.Println("after 29m:", len(ms), "leased")

	q.Advance(time.Minute)
	ms, _ = q.Lease(ctx, "order-timeouts", delayq.LeaseRequest{})
	fmt.Println("after 30m:", len(ms), "leased")
	for _, m := range ms {
		if err := closeOrder(ctx, m); err != nil {
			panic(err)
		}
		if err := q.Ack(ctx, "order-timeouts", m.ID, m.Receipt); err != nil {
			panic(err)
		}
	}
	m, _ := q.Get(ctx, "order-timeouts", "timeout-order-42")
	fmt.Println(m.ID, "is", m.State)
	// Output:
	// after 29m: 0 leased
	// after 30m: 1 leased
	// closing order-42
	// timeout-order-42 is acked
}

// Work runs a handler on every ready message and acks or nacks each as a
// Worker would; a failed message is retried after the topic's backoff.
func ExampleQueue_Work() {
	t := newExampleT()
	defer t.finish()
	ctx := context.Background()
	q := delayqtest.NewQueue(t)
	if _, err := q.SetTopicSettings(ctx, "emails", delayq.TopicSettings{
		Backoff: delayq.Backoff{Initial: time.Minute, Max: time.Hour, Multiplier: 2},
	}); err != nil {
		panic(err)
	}
	if _, err := q.Send(ctx, "emails", delayq.NewSendRequest([]byte("welcome"), delayq.WithID("welcome-bob"))); err != nil {
		panic(err)
	}

	down := true // the mail server
	send := delayq.HandlerFunc(func(ctx context.Context, m *delayq.Message) error {
		if down {
			return errors.New("mail server down")
		}
		return nil
	})
	for _, r := range q.Work(ctx, "emails", send) {
		fmt.Printf("attempt %d: %v\n", r.Message.Attempt, r.Err)
	}
	m, _ := q.Get(ctx, "emails", "welcome-bob")
	fmt.Println("then", m.State, "until the backoff is over")

	down = false
	q.AdvanceTo(m.DeliverAt)
	for _, r := range q.Work(ctx, "emails", send) {
		fmt.Printf("attempt %d: %v\n", r.Message.Attempt, r.Err)
	}
	// Output:
	// attempt 1: mail server down
	// then scheduled until the backoff is over
	// attempt 2: <nil>
}

// A delayq.Worker runs on the Queue as on a server: Advance wakes its
// long-poll, and the test waits for the handler's effect, not for time.
func Example_worker() {
	t := newExampleT()
	defer t.finish()
	ctx := context.Background()
	q := delayqtest.NewQueue(t)
	if _, err := q.Send(ctx, "order-timeouts", delayq.NewSendRequest([]byte("order-42"),
		delayq.After(30*time.Minute), delayq.WithID("timeout-order-42"))); err != nil {
		panic(err)
	}

	handled := make(chan string, 1)
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	w.HandleFunc("order-timeouts", func(ctx context.Context, m *delayq.Message) error {
		handled <- string(m.Payload)
		return nil
	})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}

	q.Advance(29 * time.Minute)
	m, _ := q.Get(ctx, "order-timeouts", "timeout-order-42")
	fmt.Println("after 29m:", m.State)

	q.Advance(time.Minute)
	select {
	case order := <-handled:
		fmt.Println("after 30m: handled", order)
	case <-time.After(10 * time.Second): // a bound for a broken queue, never reached
		fmt.Println("after 30m: not handled")
	}
	if err := w.Stop(ctx); err != nil { // waits for the ack
		panic(err)
	}
	m, _ = q.Get(ctx, "order-timeouts", "timeout-order-42")
	fmt.Println(m.ID, "is", m.State)
	// Output:
	// after 29m: scheduled
	// after 30m: handled order-42
	// timeout-order-42 is acked
}

// exampleT stands in for the *testing.T a test passes to NewQueue: a
// runnable example has none. It implements the methods NewQueue uses.
type exampleT struct {
	testing.TB // nil: any other method panics
	cleanups   []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()                         {}
func (t *exampleT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Logf(format string, args ...any) {}
func (t *exampleT) Errorf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
func (t *exampleT) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// finish runs the cleanups, last registered first, as testing does.
func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
