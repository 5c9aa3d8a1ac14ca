// Package delayq is the Go library of delayq, a durable delayed-message
// queue: the domain types (Message, TopicSettings, …), the Queue interface
// that every implementation satisfies, an HTTP Client for a delayq server,
// and a Worker that runs handlers for due messages.
//
// # Producing
//
// A producer schedules a message for a topic, due after a delay or at a
// time. Giving it an id makes the send idempotent: a second send with the
// same id creates nothing and answers the first message with Duplicate set.
//
//	c, err := delayq.NewClient("http://127.0.0.1:7070", delayq.WithToken(token))
//	m, err := c.Enqueue(ctx, "order-timeouts", []byte("order-42"),
//		delayq.After(30*time.Minute), delayq.WithID("timeout-order-42"))
//	…
//	_, err = c.Cancel(ctx, "order-timeouts", "timeout-order-42") // paid in time
//
// # Consuming
//
// A Worker leases due messages and calls the Handler registered for their
// topic, like net/http calls a handler per request. A nil return acks the
// message; an error (or a panic) nacks it, and it is retried after the
// topic's backoff until its attempts run out and it goes to the topic's
// dead-letter list.
//
//	w := delayq.NewWorker(c, delayq.WorkerConfig{Concurrency: 20})
//	w.HandleFunc("order-timeouts", closeIfUnpaid)
//	err := w.Run(ctx) // until ctx is cancelled, then a graceful shutdown
//
// The Worker runs against any Queue: a Client, or the Queue of a server
// run in the same process with server.New (package
// github.com/delayq/delayq/server), which calls the engine directly.
//
// # Errors
//
// Every implementation reports failures with the sentinels of this package
// (ErrNotFound, ErrConflict, ErrInvalid, …), tested with errors.Is; invalid
// input is an *InvalidError naming the field. The Client maps the server's
// error codes back to the same sentinels and keeps the server's message.
//
// # Caveats
//
// Delivery is at least once: a handler may see a message again after a
// lease expired, a worker crashed, or an ack was lost. Handlers should be
// idempotent, for example by checking the order's state as above.
//
// A retried Client send with a Delay is due Delay after the attempt that
// reached the server, not after the first attempt; use At for a fixed time.
//
// The Worker's lease extension and ack batching run on this machine's
// clock; a process paused for longer than a lease (a stopped VM, a long GC
// pause) loses its leases, and the handlers' contexts are cancelled with
// ErrLeaseLost when the worker notices.
package delayq
