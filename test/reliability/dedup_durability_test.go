package reliability

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// TestS17DedupDurability: ids sent, then the server is killed; resends
// within the dedup window (before and after the ack, each across a kill
// -9) create nothing, and each id is delivered exactly once. After the
// window (plus the janitor's minute) a resend is a new message.
func TestS17DedupDurability(t *testing.T) {
	const window = 10 * time.Second
	n := pick(200, 2000)
	p := newProc(t, "--dedup-window", window.String())
	p.start()
	c := client(t, p.url(), 10*time.Second)
	ctx := context.Background()
	const topic = "s17"
	id := func(i int) string { return fmt.Sprint("x", i) }
	sendAll := func(phase string) (created, dup int) {
		t.Helper()
		for i := 0; i < n; i++ {
			m, err := c.Send(ctx, topic, delayq.SendRequest{ID: id(i), Payload: []byte("x")})
			if err != nil {
				t.Fatalf("%s: send %s: %v", phase, id(i), err)
			}
			if m.Duplicate {
				dup++
			} else {
				created++
			}
		}
		return
	}
	restart := func() time.Duration {
		p.kill9()
		return p.start()
	}
	consume := func(wait time.Duration) map[string]int {
		got := map[string]int{}
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) {
			msgs, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 100, Wait: 500 * time.Millisecond})
			if err != nil {
				t.Fatalf("lease: %v", err)
			}
			for _, m := range msgs {
				got[m.ID]++
				if err := c.Ack(ctx, topic, m.ID, m.Receipt); err != nil {
					t.Errorf("ack %s: %v", m.ID, err)
				}
			}
		}
		return got
	}
	c1, _ := sendAll("first send")
	r1 := restart()
	_, d2 := sendAll("resend after kill, before delivery")
	got := consume(3 * time.Second)
	r2 := restart()
	_, d3 := sendAll("resend after ack and kill, within the window")
	again := consume(2 * time.Second)
	once := 0
	for i := 0; i < n; i++ {
		if got[id(i)] == 1 {
			once++
		}
	}
	// After the window: tombstones are purged by the janitor (once a
	// minute, starting a minute after start-up).
	time.Sleep(window + 62*time.Second)
	c4, d4 := sendAll("resend after the window")
	after := consume(3 * time.Second)

	writeResults(t, "S17-dedup", map[string]any{
		"scenario": "S17 dedup durability", "tier": tier(), "date": time.Now().UTC().Format(time.RFC3339),
		"ids": n, "dedup_window_s": window.Seconds(), "first_created": c1,
		"duplicates_after_kill_before_delivery": d2, "delivered_exactly_once": once, "delivered_ids": len(got),
		"duplicates_after_ack_and_kill": d3, "redelivered_after_ack": len(again),
		"after_window_created": c4, "after_window_duplicate": d4, "after_window_delivered": len(after),
		"recovery_ms": []float64{ms(r1), ms(r2)},
	})
	if c1 != n || d2 != n || once != n || len(got) != n || d3 != n || len(again) != 0 {
		t.Errorf("within the window: created %d, dup after kill %d, delivered once %d of %d (distinct %d), dup after ack+kill %d, redelivered %d",
			c1, d2, once, n, len(got), d3, len(again))
	}
	if c4 != n || len(after) != n {
		t.Errorf("after the window (+ janitor minute): created %d dup %d delivered %d of %d", c4, d4, len(after), n)
	}
}
