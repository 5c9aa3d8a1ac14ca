// Package server runs a delayq server as a library, in your own process:
// the engine on its store (an embedded directory, Redis, PostgreSQL or
// MySQL/MariaDB), push delivery, and the HTTP API with /metrics and the
// web dashboard. It is what `delayq serve` runs; Config has a field for
// each of its flags.
//
// Producers and Workers in the same process use Queue, which calls the
// engine directly (no HTTP, no JSON), with the API's semantics and limits;
// other processes reach the same queue over the HTTP API (delayq.Client),
// served by Serve or ListenAndServe, or mounted with Handler.
//
//	srv, err := server.New(ctx, server.Config{DataDir: "/var/lib/delayq"})
//	if err != nil {
//		return err
//	}
//	go srv.ListenAndServe() // optional: the API on 127.0.0.1:7070
//
//	w := delayq.NewWorker(srv.Queue(), delayq.WorkerConfig{})
//	w.HandleFunc("orders.close", closeUnpaidOrder)
//	err = w.Run(ctx) // until ctx ends
//
//	_, err = srv.Queue().Send(ctx, "orders.close", delayq.NewSendRequest(payload,
//		delayq.WithID("order-42"), delayq.After(30*time.Minute)))
//
//	// At exit: the Worker first (its acks go to the engine), then:
//	err = srv.Shutdown(context.Background())
//
// # Caveats
//
//   - One process owns an embedded data directory at a time; several
//     servers share a queue only on Redis, PostgreSQL or MySQL.
//   - New refuses a non-loopback Addr without Tokens unless Insecure, as
//     `delayq serve` does; Handler, mounted on your own server, is not
//     checked.
//   - The Redis store routes go-redis's log lines to Logger through
//     go-redis's process-wide logger.
package server
