package reliability

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

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
