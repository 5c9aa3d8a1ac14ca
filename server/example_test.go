package server_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/server"
)

// An embedded queue in this process: send a message due in 100 ms, lease
// it when it is due, ack it.
func Example() {
	dir, err := os.MkdirTemp("", "delayq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	srv, err := server.New(ctx, server.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	q := srv.Queue()
	if _, err := q.Send(ctx, "orders.close", delayq.NewSendRequest([]byte(`{"order":42}`),
		delayq.WithID("order-42"), delayq.After(100*time.Millisecond))); err != nil {
		log.Fatal(err)
	}
	ms, err := q.Lease(ctx, "orders.close", delayq.LeaseRequest{Wait: 10 * time.Second})
	if err != nil || len(ms) != 1 {
		log.Fatal(ms, err)
	}
	fmt.Println(ms[0].ID, string(ms[0].Payload))
	if err := q.Ack(ctx, "orders.close", ms[0].ID, ms[0].Receipt); err != nil {
		log.Fatal(err)
	}
	m, err := q.Get(ctx, "orders.close", "order-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.State)
	if err := srv.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// order-42 {"order":42}
	// acked
}
