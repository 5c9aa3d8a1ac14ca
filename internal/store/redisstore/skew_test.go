package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/engine/enginetest"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
)

// Servers whose clocks differ from Redis's: every instant must come from
// Redis TIME (one clock per deployment), so a lagging or fast server never
// releases early, never hands out a lease that is already over, never
// sleeps through a wake-up and never spins.

// countingStore counts LeaseExpire calls; everything else is the Redis
// store's (its Notifier, Clock and RateLimiter included).
type countingStore struct {
	*redisstore.Store
	expires atomic.Int64
}

func (c *countingStore) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) ([]*store.Record, error) {
	c.expires.Add(1)
	return c.Store.LeaseExpire(ctx, p)
}

// skewedEngine opens an engine on a new store of d whose clock is off by
// skew from this machine's (and so from the test Redis's).
func skewedEngine(t *testing.T, d enginetest.Deployment, skew time.Duration) (*engine.Engine, *countingStore) {
	t.Helper()
	cs := &countingStore{Store: d(t).(*redisstore.Store)}
	return enginetest.Open(t, cs, engine.Config{Clock: clock.Offset{By: skew}}), cs
}

// TestSkewedServers: due times, leases and retries through servers 2 s
// behind or ahead of Redis come from Redis TIME (on the old contract the
// engine sent now+delay, and a server 2 s slow released at once).
func TestSkewedServers(t *testing.T) {
	t.Parallel()
	enginetest.RunSkewedServers(t, deployment(t))
}

// TestSkewedServerWakesLongPolls: a long-poll on a server whose clock lags
// Redis is woken when another server promotes (the notification says
// "ready", it is not judged by the lagging clock), and a server whose
// clock runs ahead does not deliver early. Lost wake-ups would show as
// deliveries by the 5 s safety sweep.
func TestSkewedServerWakesLongPolls(t *testing.T) {
	t.Parallel()
	d := deployment(t)
	probe := enginetest.StoreClock(t, d)
	for _, skew := range []time.Duration{-2 * time.Second, -50 * time.Millisecond, 50 * time.Millisecond, 2 * time.Second} {
		waiter, _ := skewedEngine(t, d, skew)
		sender, _ := skewedEngine(t, d, -skew)
		topic := "wake" + skew.String()
		const delay = 300 * time.Millisecond
		m, err := sender.Send(ctx, topic, domain.SendRequest{Payload: []byte("x"), When: domain.When{Delay: delay}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := waiter.Lease(ctx, topic, domain.LeaseRequest{Max: 1, Wait: 10 * time.Second})
		if err != nil || len(got) != 1 {
			t.Fatalf("skew %v: lease %v %v", skew, got, err)
		}
		at := enginetest.Now(t, probe)
		if at.Before(m.DeliverAt) {
			t.Fatalf("skew %v: delivered at %v by Redis's clock, before due %v", skew, at, m.DeliverAt)
		}
		// Not a latency target: ~5 s means the wake-up was lost and the
		// safety sweep delivered it.
		if late := at.Sub(m.DeliverAt); late > 2*time.Second {
			t.Fatalf("skew %v: delivered %v after due: a lost wake-up", skew, late)
		}
	}
}

// TestFastServerExpirySweepDoesNotSpin: a server whose clock runs 300 ms
// ahead of Redis sees a lease as expired 300 ms before Redis does; its
// expiry sweep must wait for Redis's clock rather than call LeaseExpire
// in a loop (it made ~79,000 calls in 0.7 s).
func TestFastServerExpirySweepDoesNotSpin(t *testing.T) {
	t.Parallel()
	e, cs := skewedEngine(t, deployment(t), 300*time.Millisecond)
	if _, err := e.Send(ctx, "exp", domain.SendRequest{ID: "a", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	got, err := e.Lease(ctx, "exp", domain.LeaseRequest{Max: 1, Lease: 200 * time.Millisecond, Wait: time.Second})
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %v %v", got, err)
	}
	start := cs.expires.Load()
	// The lease ends 200 ms from now by Redis's clock; the expiry makes
	// the message ready again, and the second lease proves it happened.
	again, err := e.Lease(ctx, "exp", domain.LeaseRequest{Max: 1, Wait: 5 * time.Second})
	if err != nil || len(again) != 1 || again[0].Failures != 1 {
		t.Fatalf("lease after expiry: %+v %v", again, err)
	}
	time.Sleep(700 * time.Millisecond) // and nothing spins afterwards either
	calls := cs.expires.Load() - start
	t.Logf("%d LeaseExpire calls", calls)
	// A sweep every expireGrain (100 ms) at most over ~1 s, with room.
	if calls > 30 {
		t.Fatalf("%d LeaseExpire calls in about a second: the sweep spins", calls)
	}
}

// TestFastServerKeepsDedupWindow: the dedup cutoff is computed from
// Redis's clock, so a server whose clock runs an hour fast cannot purge
// tombstones acked within the window.
func TestFastServerKeepsDedupWindow(t *testing.T) {
	t.Parallel()
	enginetest.RunFastServerKeepsDedupWindow(t, deployment(t))
}
