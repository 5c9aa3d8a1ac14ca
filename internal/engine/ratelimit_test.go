package engine_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
)

// countObserver counts sends and deliveries and sums lateness and
// rate-limit delay, from the engine's counting events.
type countObserver struct {
	sent, delivered, throttled atomic.Int64
	late, held                 atomic.Int64 // ns
	fired, missed              atomic.Int64 // schedule ticks
}

func (o *countObserver) subscription() engine.Subscription {
	return engine.Subscription{Kinds: engine.CountingEvents, Handle: o.handle}
}

func (o *countObserver) handle(ev engine.Event) {
	switch ev.Kind {
	case engine.EventSent:
		o.sent.Add(int64(ev.N))
	case engine.EventDelivered:
		o.delivered.Add(1)
		o.late.Add(int64(ev.Lateness))
	case engine.EventThrottled:
		o.throttled.Add(1)
		o.held.Add(int64(ev.Held))
	case engine.EventScheduleFired:
		o.fired.Add(int64(ev.N))
	case engine.EventScheduleMissed:
		o.missed.Add(int64(ev.N))
	}
}

// TestRateLimitHeldOver30s: with 10 000 messages due at once and three
// greedy consumers, a topic limited to 100/s (burst 10) releases 100/s
// over 30 s of virtual time (±10 %), never leases a message twice, and
// reports the wait as rate-limit delay, not engine lateness.
func TestRateLimitHeldOver30s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var obs countObserver
		b := setup(t, engine.Config{Subscriptions: []engine.Subscription{obs.subscription()}})
		ctx := b.ctx
		if _, err := b.e.SetTopicSettings(ctx, "rl", domain.TopicSettings{RateLimit: &domain.RateLimit{PerSecond: 100, Burst: 10}}); err != nil {
			t.Fatal(err)
		}
		reqs := make([]domain.SendRequest, 1000)
		for batch := range 10 {
			for i := range reqs {
				reqs[i] = domain.SendRequest{ID: "m" + itoa(batch*1000+i), Payload: []byte("x")}
			}
			if _, err := b.e.SendBatch(ctx, "rl", reqs); err != nil {
				t.Fatal(err)
			}
		}
		const window = 30 * time.Second
		start := time.Now()
		var mu sync.Mutex
		seen := map[string]bool{}
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < window {
					ms, err := b.e.Lease(ctx, "rl", domain.LeaseRequest{Max: 50, Wait: time.Until(start.Add(window)), Lease: time.Hour})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, m := range ms {
						if seen[m.ID] {
							t.Errorf("%s leased twice", m.ID)
						}
						seen[m.ID] = true
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		got := len(seen)
		want := 100*30 + 10
		t.Logf("released %d in %v; mean rate-limit delay %v", got, window, time.Duration(obs.held.Load()/int64(max(got, 1))))
		if got < want*9/10 || got > want*11/10 {
			t.Fatalf("released %d in %v, want %d ±10%%", got, window, want)
		}
		info, err := b.e.Topic(ctx, "rl")
		if err != nil {
			t.Fatal(err)
		}
		if info.Counts.Ready+info.Counts.Inflight != 10_000 || info.Counts.Inflight != int64(got) {
			t.Fatalf("counts %+v after %d leases: messages lost or early", info.Counts, got)
		}
		// Everything was due at once: the wait is the limiter's, not the engine's.
		if obs.throttled.Load() < int64(got)-20 {
			t.Errorf("Throttled reported for %d of %d deliveries", obs.throttled.Load(), got)
		}
		if obs.late.Load() != 0 {
			t.Errorf("engine lateness %v reported for rate-limited messages", time.Duration(obs.late.Load()))
		}
		avgHeld := time.Duration(obs.held.Load() / int64(got))
		if avgHeld < 10*time.Second || avgHeld > 20*time.Second {
			t.Errorf("mean rate-limit delay %v, want about 15s (messages wait 0…30s)", avgHeld)
		}
	})
}

// TestRateLimitLongPollWaitsForTokens: a long-poll on a throttled topic
// is answered when the next token comes, not at the end of its wait.
func TestRateLimitLongPollWaitsForTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		if _, err := b.e.SetTopicSettings(b.ctx, "slow", domain.TopicSettings{RateLimit: &domain.RateLimit{PerSecond: 0.5}}); err != nil {
			t.Fatal(err)
		}
		send(t, b, "slow", "a", 0)
		send(t, b, "slow", "b", 0)
		if got := lease(t, b, "slow", 10, 0); len(got) != 1 {
			t.Fatalf("first lease: %v (burst defaults to 1)", ids(got))
		}
		if got := lease(t, b, "slow", 10, 0); len(got) != 0 {
			t.Fatalf("second lease without waiting: %v", ids(got))
		}
		start := time.Now()
		got := lease(t, b, "slow", 10, 30*time.Second)
		if len(got) != 1 || got[0].ID != "b" {
			t.Fatalf("long-poll: %v", ids(got))
		}
		if el := time.Since(start); el != 2*time.Second {
			t.Fatalf("long-poll answered after %v, want 2s (the next token)", el)
		}
		// Lifting the limit releases at once.
		send(t, b, "slow", "c", 0)
		send(t, b, "slow", "d", 0)
		if _, err := b.e.SetTopicSettings(b.ctx, "slow", domain.TopicSettings{}); err != nil {
			t.Fatal(err)
		}
		if got := lease(t, b, "slow", 10, 0); len(got) != 2 {
			t.Fatalf("after removing the limit: %v", ids(got))
		}
	})
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
