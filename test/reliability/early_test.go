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
// docs/reliability.md.
func TestNeverEarlyNoFaults(t *testing.T) {
	s := seed(t)
	rng := newRand(s)
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 2000
	var mu sync.Mutex
	var early, trulyEarly []string
	seen := 0
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				msgs, err := c.Lease(ctx, "early", delayq.LeaseRequest{Max: 16, Wait: time.Second})
				if err != nil {
					continue
				}
				got := time.Now() // same machine, same wall clock as the server
				for _, m := range msgs {
					mu.Lock()
					if got.Before(m.DeliverAt) {
						trulyEarly = append(trulyEarly, fmt.Sprintf("%s received at %s, due %s", m.ID, got.Format("15:04:05.000"), m.DeliverAt.Format("15:04:05.000")))
					}
					seen++
					if m.UpdatedAt.Before(m.DeliverAt) {
						early = append(early, fmt.Sprintf("%s leased at %s, due %s (%v early)", m.ID,
							m.UpdatedAt.Format("15:04:05.000"), m.DeliverAt.Format("15:04:05.000"), m.DeliverAt.Sub(m.UpdatedAt)))
					}
					mu.Unlock()
					_ = c.Ack(ctx, "early", m.ID, m.Receipt)
				}
			}
		}()
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
		done := seen >= n
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
	t.Logf("seed %d: %d of %d deliveries stamped (updated_at) before deliver_at; %d received before deliver_at by the wall clock", s, len(early), seen, len(trulyEarly))
	if len(trulyEarly) > 0 {
		t.Errorf("%d deliveries received before deliver_at: %v", len(trulyEarly), first(trulyEarly, 5))
	}
	if len(early) > 0 {
		t.Errorf("%d deliveries before deliver_at by the server's clock, e.g. %v", len(early), first(early, 5))
	}
}
