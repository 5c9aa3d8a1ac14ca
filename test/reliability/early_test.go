package reliability

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// TestNeverEarlyNoFaults is the smallest load that shows a delivery before
// its deliver_at by the server's own clock (updated_at of the lease answer
// vs deliver_at), with no faults at all: one producer, short delays, a few
// long-polling consumers. Regression test for defect D1 in
// docs/reliability.md. Every message sent must be delivered, so a run that
// delivers nothing (or fails its leases) cannot pass.
func TestNeverEarlyNoFaults(t *testing.T) {
	s := seed(t)
	rng := newRand(s)
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	const n = 2000
	var mu sync.Mutex
	var early, trulyEarly []string
	delivered := map[string]int{} // deliveries per id
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // no consumer outlives the test, even after t.Fatal
	// No fault is injected, so any error but the cancel that ends the
	// consumers fails the test.
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				msgs, err := c.Lease(ctx, "early", delayq.LeaseRequest{Max: 16, Wait: time.Second})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("lease: %v", err)
					}
					return
				}
				got := time.Now() // same machine, same wall clock as the server
				for _, m := range msgs {
					mu.Lock()
					if got.Before(m.DeliverAt) {
						trulyEarly = append(trulyEarly, fmt.Sprintf("%s received at %s, due %s", m.ID, got.Format("15:04:05.000"), m.DeliverAt.Format("15:04:05.000")))
					}
					delivered[m.ID]++
					if m.UpdatedAt.Before(m.DeliverAt) {
						early = append(early, fmt.Sprintf("%s leased at %s, due %s (%v early)", m.ID,
							m.UpdatedAt.Format("15:04:05.000"), m.DeliverAt.Format("15:04:05.000"), m.DeliverAt.Sub(m.UpdatedAt)))
					}
					mu.Unlock()
					if err := c.Ack(ctx, "early", m.ID, m.Receipt); err != nil && ctx.Err() == nil {
						t.Errorf("ack %s: %v", m.ID, err)
					}
				}
			}
		})
	}
	for k := 0; k < n; k++ {
		if _, err := c.Send(ctx, "early", delayq.SendRequest{ID: fmt.Sprint("m", k), Payload: []byte("x"), When: delayq.When{Delay: rng.Dur(0, time.Second)}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := len(delivered) >= n
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var missing []string
	redelivered := 0
	for k := 0; k < n; k++ {
		switch d := delivered[fmt.Sprint("m", k)]; {
		case d == 0:
			missing = append(missing, fmt.Sprint("m", k))
		case d > 1:
			redelivered++ // at-least-once allows it (a lease that ran out under load)
		}
	}
	t.Logf("seed %d: %d of %d messages delivered (%d more than once); %d deliveries stamped (updated_at) before deliver_at; %d received before deliver_at by the wall clock",
		s, n-len(missing), n, redelivered, len(early), len(trulyEarly))
	if len(missing) > 0 || len(delivered) != n {
		t.Errorf("%d of %d sent messages never delivered, e.g. %v; %d distinct ids delivered", len(missing), n, first(missing, 5), len(delivered))
	}
	if len(trulyEarly) > 0 {
		t.Errorf("%d deliveries received before deliver_at: %v", len(trulyEarly), first(trulyEarly, 5))
	}
	if len(early) > 0 {
		t.Errorf("%d deliveries before deliver_at by the server's clock, e.g. %v", len(early), first(early, 5))
	}
}
