package delayq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/store/memstore"
)

// orderBook is the shop's own state: which orders are paid.
type orderBook struct {
	mu     sync.Mutex
	status map[string]string
}

func (b *orderBook) set(id, s string) { b.mu.Lock(); b.status[id] = s; b.mu.Unlock() }
func (b *orderBook) get(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status[id]
}

// Close an unpaid order after 30 minutes. Placing an order schedules a
// timeout message whose id is derived from the order, so a retried
// placement does not schedule it twice; paying cancels it; a worker closes
// the order when the timeout comes due.
//
// The example runs an in-process engine on a simulated clock, so "30
// minutes later" takes no time. Against a server, use a Client instead of
// the engine: both are a delayq.Queue.
func Example_orderTimeout() {
	ctx := context.Background()
	clk := clock.NewSim(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	q, err := engine.Open(ctx, engine.Config{Store: memstore.New(), Clock: clk, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)
	orders := &orderBook{status: map[string]string{}}

	// The shop: placing an order schedules its timeout.
	place := func(order string) {
		orders.set(order, "unpaid")
		m, err := q.Send(ctx, "order-timeouts", delayq.NewSendRequest([]byte(order),
			delayq.After(30*time.Minute), delayq.WithID("timeout-"+order)))
		if err != nil {
			panic(err)
		}
		fmt.Printf("placed %s: timeout %s, duplicate=%v\n", order, m.State, m.Duplicate)
	}
	place("order-42")
	place("order-42") // a retried request: same id, nothing new
	place("order-43")

	// Payment arrives for order-43: cancel its timeout.
	orders.set("order-43", "paid")
	if _, err := q.Cancel(ctx, "order-timeouts", "timeout-order-43"); err != nil {
		panic(err)
	}

	// The worker closes orders whose timeout came due and are still unpaid.
	closed := make(chan struct{})
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: quiet})
	w.HandleFunc("order-timeouts", func(ctx context.Context, m *delayq.Message) error {
		order := string(m.Payload)
		if orders.get(order) == "unpaid" {
			orders.set(order, "closed")
			fmt.Println("closed unpaid", order)
		}
		close(closed)
		return nil
	})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}

	clk.Advance(29 * time.Minute)
	m, _ := q.Get(ctx, "order-timeouts", "timeout-order-42")
	fmt.Println("after 29m the timeout is", m.State)

	clk.Advance(time.Minute)
	<-closed
	if err := w.Stop(ctx); err != nil {
		panic(err)
	}
	m, _ = q.Get(ctx, "order-timeouts", "timeout-order-42")
	fmt.Println("after 30m the timeout is", m.State)
	fmt.Println("order-42:", orders.get("order-42"), "/ order-43:", orders.get("order-43"))
	// Output:
	// placed order-42: timeout scheduled, duplicate=false
	// placed order-42: timeout scheduled, duplicate=true
	// placed order-43: timeout scheduled, duplicate=false
	// after 29m the timeout is scheduled
	// closed unpaid order-42
	// after 30m the timeout is acked
	// order-42: closed / order-43: paid
}

// startExampleServer runs a delayq server in-process, as `delayq serve`
// would, and returns its URL and a function that stops it.
func startExampleServer() (string, func()) {
	ctx := context.Background()
	eng, err := engine.Open(ctx, engine.Config{Store: memstore.New(), Logger: quiet})
	if err != nil {
		panic(err)
	}
	srv, err := httpapi.New(httpapi.Config{Queue: eng, Logger: quiet})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(srv.Handler())
	return ts.URL, func() { ts.Close(); eng.Close(ctx) }
}

// A Client speaks HTTP to a delayq server. Errors match the package's
// sentinels whatever the transport.
func ExampleClient() {
	url, stop := startExampleServer() // e.g. "http://127.0.0.1:7070"
	defer stop()
	ctx := context.Background()

	c, err := delayq.NewClient(url, delayq.WithToken("token-if-the-server-wants-one"))
	if err != nil {
		panic(err)
	}
	m, err := c.Enqueue(ctx, "reminders", []byte("call Bob"), delayq.After(24*time.Hour), delayq.WithID("reminder-bob"))
	if err != nil {
		panic(err)
	}
	fmt.Println(m.ID, m.State, m.DeliverAt.Sub(m.CreatedAt))

	if _, err := c.Get(ctx, "reminders", "reminder-alice"); errors.Is(err, delayq.ErrNotFound) {
		fmt.Println("no reminder for Alice")
	}
	_, err = c.Enqueue(ctx, "reminders", []byte("x"), delayq.After(-time.Minute))
	var invalid *delayq.InvalidError
	if errors.As(err, &invalid) {
		fmt.Println("rejected field:", invalid.Field)
	}
	// Output:
	// reminder-bob scheduled 24h0m0s
	// no reminder for Alice
	// rejected field: delay
}

// sendReminder is a consumer task in the shape Java queue users know: it
// names its topic and executes one message.
type sendReminder struct{ sent chan<- string }

func (sendReminder) Topic() string { return "reminders" }

func (t sendReminder) Execute(ctx context.Context, m *delayq.Message) error {
	t.sent <- "reminder: " + string(m.Payload)
	return nil
}

// Register a Task with a Worker; Use adds middleware around every handler.
func ExampleWorker_Register() {
	ctx := context.Background()
	q, err := engine.Open(ctx, engine.Config{Store: memstore.New(), Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)
	if _, err := q.Send(ctx, "reminders", delayq.NewSendRequest([]byte("call Bob"))); err != nil {
		panic(err)
	}

	sent := make(chan string, 1)
	w := delayq.NewWorker(q, delayq.WorkerConfig{Concurrency: 4, Logger: quiet})
	w.Use(func(next delayq.Handler) delayq.Handler {
		return delayq.HandlerFunc(func(ctx context.Context, m *delayq.Message) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute) // a per-message time limit
			defer cancel()
			return next.Handle(ctx, m)
		})
	})
	w.Register(sendReminder{sent: sent})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	fmt.Println(<-sent)
	if err := w.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// reminder: call Bob
}
