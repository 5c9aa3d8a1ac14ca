package reliability

import (
	"context"
	"math"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

func isPoison(id string) bool {
	_, k, ok := parseMsgID(id)
	return ok && k%100 == 0
}

// TestS14PoisonMessages: 1% of messages always fail. Each must reach the
// dead letters after exactly max_attempts (5) failures, once, across one
// kill -9; replaying them works.
func TestS14PoisonMessages(t *testing.T) {
	s := seed(t)
	t.Logf("tier %s seed %d", tier(), s)
	const maxAttempts = 5
	backoff := delayq.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: 0.2}
	cfg := loadConfig{
		Topic: "s14", Messages: pick(2_000, 20_000), Producers: 4, Consumers: 4,
		MaxDelay: 2 * time.Second, Lease: 2 * time.Second, MaxWork: 20 * time.Millisecond,
		SendSpan: pick(6*time.Second, 30*time.Second), LeaseMax: 16,
	}
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 10*time.Second)
	ctx := context.Background()
	if _, err := c.SetTopicSettings(ctx, cfg.Topic, delayq.TopicSettings{MaxAttempts: maxAttempts, Backoff: backoff, Lease: cfg.Lease}); err != nil {
		t.Fatal(err)
	}
	l := newLoad(t, cfg, c, s)
	l.handle = func(m *delayq.Message) bool { return !isPoison(m.ID) }
	t0 := time.Now()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()

	// One kill -9 in the middle of the run.
	time.Sleep(cfg.SendSpan / 2)
	killAt := l.rec.Now()
	p.kill9()
	outstanding := l.outstandingAt(killAt)
	rec, err := p.tryStart(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.rec.Down(killAt, l.rec.Now())
	<-prodDone

	poison := 0
	l.mu.Lock()
	for id := range l.sentOK {
		if isPoison(id) {
			poison++
		}
	}
	l.mu.Unlock()
	// Drain: healthy ones delivered, poison ones dead.
	var dead map[string]*delayq.Message
	deadline := time.Now().Add(cfg.MaxDelay + 30*time.Second)
	for {
		dead = deadIDs(ctx, t, c, cfg.Topic)
		if len(dead) >= poison || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	missing := l.drain(10*time.Second, func(id string) bool { return dead[id] != nil })
	time.Sleep(cfg.Lease + 500*time.Millisecond)
	l.stopConsumers()
	dead = deadIDs(ctx, t, c, cfg.Topic)

	// Every poison message dead once with exactly maxAttempts failures;
	// no healthy message dead.
	attempts := map[int]int{}
	var wrongFailures, healthyDead []string
	deadSet := map[string]bool{}
	for id, m := range dead {
		deadSet[id] = true
		attempts[m.Attempt]++
		if !isPoison(id) {
			healthyDead = append(healthyDead, id)
		} else if m.Failures != maxAttempts {
			wrongFailures = append(wrongFailures, id)
		}
	}
	var notDead []string
	l.mu.Lock()
	for id := range l.sentOK {
		if isPoison(id) && dead[id] == nil {
			notDead = append(notDead, id)
		}
	}
	// Observed backoff: the due time a nack answered vs the policy.
	maxRel := 0.0
	for _, m := range l.nackResp {
		if m.State == delayq.StateDead {
			continue
		}
		want := float64(backoff.Initial) * math.Pow(backoff.Multiplier, float64(m.Failures-1))
		want = math.Min(want, float64(backoff.Max))
		got := float64(m.DeliverAt.Sub(m.UpdatedAt))
		rel := math.Abs(got-want) / want
		maxRel = math.Max(maxRel, rel)
	}
	nacks := len(l.nackResp)
	l.mu.Unlock()

	info, rejected := l.ackUncertain()
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{Dead: deadSet, DupBound: outstanding + info + rejected, Slack: 2 * time.Millisecond})

	// Replay: every dead letter back, delivered with failures reset, acked.
	replayed, err := c.DeadReplayAll(ctx, cfg.Topic)
	if err != nil {
		t.Fatalf("replay all: %v", err)
	}
	got := map[string]bool{}
	var replayBad []string
	rdeadline := time.Now().Add(20 * time.Second)
	for len(got) < replayed && time.Now().Before(rdeadline) {
		msgs, err := c.Lease(ctx, cfg.Topic, delayq.LeaseRequest{Max: 100, Wait: time.Second})
		if err != nil {
			t.Fatalf("lease replayed: %v", err)
		}
		for _, m := range msgs {
			if !deadSet[m.ID] || m.Failures != 0 || got[m.ID] {
				replayBad = append(replayBad, m.ID)
			}
			got[m.ID] = true
			if err := c.Ack(ctx, cfg.Topic, m.ID, m.Receipt); err != nil {
				t.Errorf("ack replayed %s: %v", m.ID, err)
			}
		}
	}
	after := deadIDs(ctx, t, c, cfg.Topic)

	hist := map[string]int{}
	for a, n := range attempts {
		hist[strconv.Itoa(a)] = n
	}
	sort.Strings(healthyDead)
	writeResults(t, "S14-poison", map[string]any{
		"scenario": "S14 poison messages", "tier": tier(), "seed": s, "date": time.Now().UTC().Format(time.RFC3339),
		"config": l.cfg, "max_attempts": maxAttempts, "backoff": map[string]any{"initial_ms": 100, "max_ms": 2000, "multiplier": 2, "jitter": 0.2},
		"poison_sent": poison, "dead_letters": len(dead), "poison_not_dead": first(notDead, 20), "healthy_dead": first(healthyDead, 20),
		"dead_with_wrong_failures": first(wrongFailures, 20), "dead_attempts_histogram": hist,
		"nacks_ok": nacks, "backoff_max_relative_error": maxRel, "leases_outstanding_at_kill": outstanding, "recovery_ms": ms(rec),
		"check": toCheckJSON(res, len(l.deliveries)), "replayed": replayed, "replay_delivered": len(got), "replay_bad": first(replayBad, 20),
		"dead_after_replay": len(after), "drain_missing": missing, "duration_s": time.Since(t0).Seconds(),
	})
	if len(notDead) > 0 || len(healthyDead) > 0 || len(wrongFailures) > 0 {
		t.Errorf("dead letters: %d poison not dead %v, %d healthy dead %v, %d with failures ≠ %d %v",
			len(notDead), first(notDead, 5), len(healthyDead), first(healthyDead, 5), len(wrongFailures), maxAttempts, first(wrongFailures, 5))
	}
	if maxRel > backoff.Jitter+0.05 {
		t.Errorf("backoff: max relative error %.3f, want ≤ jitter %.2f (+ms rounding)", maxRel, backoff.Jitter)
	}
	if len(res.Lost) > 0 || len(res.Unexpected) > 0 || len(res.EarlyClient) > 0 || len(res.Resurrected) > 0 || res.Duplicated > res.DupBound {
		t.Errorf("checker: %v", res)
	}
	if len(res.Early) > 0 {
		t.Errorf("early by the server's clock (defect D1): %d", len(res.Early))
	}
	if replayed != len(dead) || len(got) != replayed || len(replayBad) > 0 || len(after) != 0 {
		t.Errorf("replay: %d replayed of %d dead, %d delivered, bad %v, %d dead after", replayed, len(dead), len(got), first(replayBad, 5), len(after))
	}
}
