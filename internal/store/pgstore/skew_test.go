package pgstore_test

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// Servers whose clocks differ from the database's: every instant must
// come from the database's clock (one clock per deployment), so a lagging
// or fast server never releases early, never hands out a lease that is
// already over, and never sleeps through a wake-up.

// skewedEngine opens an engine on schema whose clock is off by skew from
// this machine's (and so from the test database's).
func skewedEngine(t *testing.T, srv *pgtest.Server, schema string, skew time.Duration) *engine.Engine {
	t.Helper()
	s, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(ctx, engine.Config{Store: s, Clock: clock.Offset{By: skew}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Close(ctx)
		_ = s.Close()
	})
	return e
}

func dbNow(t *testing.T, s *pgstore.Store) time.Time {
	t.Helper()
	ms, _, err := s.StoreNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(ms)
}

// TestSkewedServers: a send with a delay through a server 2 s behind the
// database is due delay after the database's now, not 2 s early; a lease
// and a retry through a server 2 s ahead end lease/retry after the
// database's now; a long-poll on either is woken, never early and not by
// the safety sweep.
func TestSkewedServers(t *testing.T) {
	srv := pgtest.Shared(t)
	probe := openAt(t, srv)
	schema := probe.Schema()
	slow := skewedEngine(t, srv, schema, -2*time.Second)
	fast := skewedEngine(t, srv, schema, 2*time.Second)

	const delay = time.Second
	before := dbNow(t, probe)
	m, err := slow.Send(ctx, "skew", domain.SendRequest{ID: "a", Payload: []byte("x"), When: domain.When{Delay: delay}})
	if err != nil {
		t.Fatal(err)
	}
	after := dbNow(t, probe)
	if m.DeliverAt.Before(before.Add(delay)) || m.DeliverAt.After(after.Add(delay)) {
		t.Fatalf("sent through a server 2 s slow: due %v, want delay after the database's now (%v … %v)", m.DeliverAt, before.Add(delay), after.Add(delay))
	}
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
	leasedAt := dbNow(t, probe)
	if leasedAt.Before(m.DeliverAt) {
		t.Fatalf("leased at %v by the database's clock, before its due time %v", leasedAt, m.DeliverAt)
	}
	if late := leasedAt.Sub(m.DeliverAt); late > 2*time.Second {
		t.Fatalf("leased %v after due: a lost wake-up", late)
	}
	if until := got[0].LeaseExpiresAt; until.After(leasedAt.Add(5*time.Second)) || until.Before(leasedAt.Add(4*time.Second)) {
		t.Fatalf("lease through a server 2 s fast ends %v, want ~5 s after the database's now %v", until, leasedAt)
	}
	n, err := fast.Nack(ctx, "skew", "a", got[0].Receipt, domain.NackRequest{Delay: time.Second, HasDelay: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := n.DeliverAt.Sub(dbNow(t, probe)); d > time.Second || d < 500*time.Millisecond {
		t.Fatalf("retry through a server 2 s fast is due in %v by the database's clock, want ~1 s", d)
	}
	again, err := slow.Lease(ctx, "skew", domain.LeaseRequest{Max: 1, Wait: 5 * time.Second})
	if err != nil || len(again) != 1 {
		t.Fatalf("lease of the retry on the slow server: %v %v", again, err)
	}
	if at := dbNow(t, probe); at.Before(n.DeliverAt) || at.Sub(n.DeliverAt) > 2*time.Second {
		t.Fatalf("retry leased at %v, due %v: early, or a lost wake-up", at, n.DeliverAt)
	}
}

// TestFastServerKeepsDedupWindow: the dedup cutoff is computed from the
// database's clock, so a server whose clock runs an hour fast cannot
// purge tombstones acked within the window.
func TestFastServerKeepsDedupWindow(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	send(t, s, "d", "a", 0)
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
	if r, err := s.MessageGet(ctx, "d", "a"); err != nil || r.State != store.StateAcked {
		t.Fatalf("tombstone: %+v %v", r, err)
	}
	n, err = s.DedupPurge(ctx, &store.DedupPurgeParams{Window: -1000, Max: 10})
	if err != nil || n != 1 {
		t.Fatalf("purge past the window: %d %v", n, err)
	}
}
