package reliability

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/history"
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

// TestS28GracefulDrain: SIGTERM under load. The server exits 0 within the
// drain timeout; every ack answered ok stays acked (no redelivery); leases
// outstanding at shutdown are redelivered after the restart.
func TestS28GracefulDrain(t *testing.T) {
	s := seed(t)
	cfg := loadConfig{
		Topic: "s28", Messages: pick(3_000, 20_000), Producers: 4, Consumers: 4,
		MaxDelay: time.Second, Lease: 3 * time.Second, MaxWork: 30 * time.Millisecond,
		SendSpan: pick(8*time.Second, 40*time.Second), LeaseMax: 16,
	}
	p := newProc(t, "--default-lease", "3s", "--drain-timeout", "5s")
	p.start()
	c := client(t, p.url(), 10*time.Second)
	l := newLoad(t, cfg, c, s)
	var holding atomic.Bool
	var heldMu sync.Mutex
	held := map[string]bool{}
	l.hold = func(m *delayq.Message) bool {
		if !holding.Load() {
			return false
		}
		heldMu.Lock()
		held[m.ID] = true
		heldMu.Unlock()
		return true
	}
	ctx := context.Background()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()
	time.Sleep(cfg.SendSpan / 2)
	holding.Store(true) // consumers caught by the shutdown keep their leases
	time.Sleep(300 * time.Millisecond)
	termAt := l.rec.Now()
	took, exitErr := p.term(10 * time.Second)
	downFrom := l.rec.Now()
	heldMu.Lock()
	nHeld := len(held)
	heldMu.Unlock()
	holding.Store(false)
	rec := p.start()
	l.rec.Down(termAt, l.rec.Now())
	_ = downFrom
	<-prodDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+20*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second)
	l.stopConsumers()

	// Every held lease came back after the restart.
	redelivered := 0
	l.mu.Lock()
	count := map[string]int{}
	for _, d := range l.deliveries {
		count[d.id]++
	}
	l.mu.Unlock()
	heldMu.Lock()
	var notBack []string
	for id := range held {
		if count[id] >= 2 {
			redelivered++
		} else {
			notBack = append(notBack, id)
		}
	}
	heldMu.Unlock()
	info, rejected := l.ackUncertain()
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{DupBound: nHeld + info + rejected, Slack: 2 * time.Millisecond})
	exit := "0"
	if exitErr != nil {
		exit = exitErr.Error()
	}
	writeResults(t, "S28-graceful-drain", map[string]any{
		"scenario": "S28 graceful drain", "tier": tier(), "seed": s, "date": time.Now().UTC().Format(time.RFC3339),
		"config": l.cfg, "shutdown_ms": ms(took), "exit": exit, "leases_held_at_shutdown": nHeld, "held_redelivered": redelivered,
		"held_not_redelivered": first(notBack, 20), "restart_ready_ms": ms(rec), "check": toCheckJSON(res, len(l.deliveries)),
		"acks_info": info, "acks_rejected": rejected, "drain_missing": missing,
	})
	if exitErr != nil || took > 6*time.Second {
		t.Errorf("shutdown: exit %v after %v, want 0 within the 5s drain timeout (+1s)", exitErr, took)
	}
	if nHeld == 0 {
		t.Errorf("no lease was outstanding at shutdown; the scenario tested nothing")
	}
	if len(notBack) > 0 {
		t.Errorf("%d leases outstanding at shutdown were not redelivered: %v", len(notBack), first(notBack, 5))
	}
	if len(res.Lost) > 0 || len(res.Unexpected) > 0 || len(res.EarlyClient) > 0 || len(res.Resurrected) > 0 || res.Duplicated > res.DupBound {
		t.Errorf("checker: %v", res)
	}
	if len(res.Early) > 0 {
		t.Errorf("early by the server's clock (defect D1): %d", len(res.Early))
	}
}
