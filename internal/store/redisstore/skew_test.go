package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
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

// skewedEngine opens an engine whose clock is off by skew from this
// machine's (and so from the test Redis's).
func skewedEngine(t *testing.T, url, prefix string, skew time.Duration) (*engine.Engine, *countingStore) {
	t.Helper()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: url, Prefix: prefix, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: s}
	e, err := engine.Open(ctx, engine.Config{Store: cs, Clock: clock.Offset{By: skew}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Close(ctx)
		_ = s.Close()
	})
	return e, cs
}

func redisNow(t *testing.T, srv interface{ URL() string }) time.Time {
	t.Helper()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: uniquePrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms, _, err := s.StoreNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(ms)
}

// TestSkewedServerDueTimesFromRedis: a send with a delay through a server
// 2 s behind Redis is due delay after Redis's now — not 2 s early, which
// on the old contract (the engine sent now+delay) released it at once.
// Leases and retries through a server 2 s ahead end lease/retry after
// Redis's now, not 2 s later.
func TestSkewedServerDueTimesFromRedis(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	prefix := uniquePrefix()
	slow, _ := skewedEngine(t, srv.URL(), prefix, -2*time.Second)
	fast, _ := skewedEngine(t, srv.URL(), prefix, 2*time.Second)

	const delay = time.Second
	before := redisNow(t, srv)
	m, err := slow.Send(ctx, "skew", domain.SendRequest{ID: "a", Payload: []byte("x"), When: domain.When{Delay: delay}})
	if err != nil {
		t.Fatal(err)
	}
	after := redisNow(t, srv)
	if m.DeliverAt.Before(before.Add(delay)) || m.DeliverAt.After(after.Add(delay)) {
		t.Fatalf("sent through a server 2 s slow: due %v, want delay after Redis's now (%v … %v)", m.DeliverAt, before.Add(delay), after.Add(delay))
	}
	// Nothing is handed out before it is due by Redis's clock, by either.
	for _, e := range []*engine.Engine{slow, fast} {
		got, err := e.Lease(ctx, "skew", domain.LeaseRequest{Max: 1})
		if err != nil || len(got) != 0 {
			t.Fatalf("lease before due: %v %v", got, err)
		}
	}
	got, err := fast.Lease(ctx, "skew", domain.LeaseRequest{Max: 1, Lease: 5 * time.Second, Wait: 5 * time.Second})
	if err != nil || len(got) != 1 {
		t.Fatalf("lease when due: %v %v", got, err)
	}
	leasedAt := redisNow(t, srv)
	if leasedAt.Before(m.DeliverAt) {
		t.Fatalf("leased at %v by Redis's clock, before its due time %v", leasedAt, m.DeliverAt)
	}
	if until := got[0].LeaseExpiresAt; until.After(leasedAt.Add(5*time.Second)) || until.Before(leasedAt.Add(5*time.Second-time.Second)) {
		t.Fatalf("lease through a server 2 s fast ends %v, want ~5 s after Redis's now %v", until, leasedAt)
	}
	n, err := fast.Nack(ctx, "skew", "a", got[0].Receipt, domain.NackRequest{Delay: time.Second, HasDelay: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := n.DeliverAt.Sub(redisNow(t, srv)); d > time.Second || d < 500*time.Millisecond {
		t.Fatalf("retry through a server 2 s fast is due in %v by Redis's clock, want ~1 s", d)
	}
}

// TestSkewedServerWakesLongPolls: a long-poll on a server whose clock lags
// Redis is woken when another server promotes (the notification says
// "ready", it is not judged by the lagging clock), and a server whose
// clock runs ahead does not deliver early. Lost wake-ups would show as
// deliveries by the 5 s safety sweep.
func TestSkewedServerWakesLongPolls(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	prefix := uniquePrefix()
	for _, skew := range []time.Duration{-2 * time.Second, -50 * time.Millisecond, 50 * time.Millisecond, 2 * time.Second} {
		waiter, _ := skewedEngine(t, srv.URL(), prefix, skew)
		sender, _ := skewedEngine(t, srv.URL(), prefix, -skew)
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
		at := redisNow(t, srv)
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
	srv := standalone(t)
	e, cs := skewedEngine(t, srv.URL(), uniquePrefix(), 300*time.Millisecond)
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
	srv := standalone(t)
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: uniquePrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "d", Messages: []store.InsertMessage{{ID: "a", Relative: true, MaxAttempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "d", Max: 1, LeaseFor: 60_000, Token: "t"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "d", ID: "a", Receipt: recs[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	hourFast := time.Now().Add(time.Hour).UnixMilli()
	n, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Now: hourFast, Window: (30 * time.Minute).Milliseconds(), Max: 10})
	if err != nil || n != 0 {
		t.Fatalf("purge by a server an hour fast, 30 min window: %d purged, %v; want 0", n, err)
	}
	r, err := s.MessageGet(ctx, "d", "a")
	if err != nil || r.State != store.StateAcked {
		t.Fatalf("tombstone: %+v %v", r, err)
	}
	// And the window does end, by Redis's clock.
	n, err = s.DedupPurge(ctx, &store.DedupPurgeParams{Window: -1000, Max: 10})
	if err != nil || n != 1 {
		t.Fatalf("purge past the window: %d %v", n, err)
	}
}
