package redisstore_test

import (
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/redisstore"
)

// TestTwoEngines: a delayed send through one engine is delivered, not
// early, to a long-poll on another engine sharing the Redis (promotion by
// whichever engine's timer fires; wake-up through the notifier).
func TestTwoEngines(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	prefix := uniquePrefix()
	var engines []*engine.Engine
	for range 2 {
		s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.Open(ctx, engine.Config{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.Close(ctx)
			_ = s.Close()
		})
		engines = append(engines, e)
	}
	const delay = 300 * time.Millisecond
	sent := time.Now()
	if _, err := engines[0].Send(ctx, "jobs", delayq.SendRequest{ID: "j1", Payload: []byte("hi"), When: delayq.When{Delay: delay}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := engines[1].Lease(ctx, "jobs", delayq.LeaseRequest{Max: 1, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := time.Since(sent)
	if len(msgs) != 1 || msgs[0].ID != "j1" {
		t.Fatalf("lease: %+v", msgs)
	}
	if got < delay {
		t.Fatalf("delivered after %v, before its %v delay", got, delay)
	}
	t.Logf("delivered after %v (delay %v)", got, delay)
	if err := engines[1].Ack(ctx, "jobs", "j1", msgs[0].Receipt); err != nil {
		t.Fatal(err)
	}
}
