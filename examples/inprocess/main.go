// Command inprocess runs delayq inside the program that uses it, with no
// server process: server.New opens an embedded queue on a data directory,
// and a Worker runs closeUnpaidOrder on its Queue directly (no HTTP).
//
// It places three orders, pays one, and schedules each order's payment
// timeout about a second ahead; then it waits until the Worker has
// handled every timeout (the unpaid orders closed, the paid one left
// alone), shuts down and exits 0. It exits 1 if anything is not done
// within 30 seconds.
//
//	go run . [-data DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/server"
)

const (
	topic   = "order-timeouts"
	timeout = time.Second // the payment window, short for the demo
	bound   = 30 * time.Second
)

func main() {
	data := flag.String("data", "", "data `directory` of the embedded queue (default: a temporary one, removed at exit)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(*data, log); err != nil {
		fmt.Fprintln(os.Stderr, "inprocess:", err)
		os.Exit(1)
	}
}

func run(dataDir string, log *slog.Logger) (err error) {
	if dataDir == "" {
		dir, err := os.MkdirTemp("", "delayq-inprocess-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dataDir = dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	srv, err := server.New(ctx, server.Config{DataDir: dataDir, Logger: log})
	if err != nil {
		return err
	}
	// Last: the Worker, stopped before, has sent its acks to the engine.
	defer func() { err = errors.Join(err, srv.Shutdown(context.Background())) }()
	q := srv.Queue()

	// handled reports each timeout closeUnpaidOrder finished without error
	// (a failed one is retried after the topic's backoff).
	handled := make(chan string, 16)
	w := delayq.NewWorker(q, delayq.WorkerConfig{Logger: log})
	w.HandleFunc(topic, func(ctx context.Context, m *delayq.Message) error {
		if err := closeUnpaidOrder(ctx, m); err != nil {
			return err
		}
		select {
		case handled <- m.ID:
		default: // a redelivery nobody waits for
		}
		return nil
	})
	want := map[string]string{"order-1": statusClosed, "order-2": statusPaid, "order-3": statusClosed}
	for id := range want {
		orders.place(id)
	}
	orders.pay("order-2")

	if err := w.Start(ctx); err != nil {
		return err
	}
	stopWorker := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return w.Stop(sctx)
	}
	defer func() { err = errors.Join(err, stopWorker()) }() // idempotent

	// A message id makes a retried send safe (the second is a duplicate);
	// this run's own ids keep a reused -data directory's acked timeouts,
	// still deduplicating, from swallowing this run's.
	run := strconv.FormatInt(time.Now().UnixMilli(), 36)
	pending := map[string]bool{}
	for id := range want {
		msgID := "timeout-" + id + "-" + run
		if _, err := q.Send(ctx, topic, delayq.NewSendRequest([]byte(id),
			delayq.WithID(msgID), delayq.After(timeout))); err != nil {
			return err
		}
		pending[msgID] = true
	}
	fmt.Printf("placed %d orders, paid order-2; their payment timeouts are due in %s\n", len(want), timeout)

	for len(pending) > 0 {
		select {
		case id := <-handled:
			delete(pending, id)
		case <-ctx.Done():
			return fmt.Errorf("%d of %d payment timeouts not handled within %s", len(pending), len(want), bound)
		}
	}
	if err := stopWorker(); err != nil { // sends the acks still batched
		return err
	}
	for id, status := range want {
		m, err := q.Get(ctx, topic, "timeout-"+id+"-"+run)
		if err != nil {
			return err
		}
		if m.State != delayq.StateAcked {
			return fmt.Errorf("the timeout of %s is %s, want acked", id, m.State)
		}
		if got := orders.get(id); got != status {
			return fmt.Errorf("%s is %s, want %s", id, got, status)
		}
	}
	fmt.Println("every payment timeout handled: order-1 and order-3 closed, order-2 paid")
	return nil
}
