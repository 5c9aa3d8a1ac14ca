package memstore_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/store/storetest"
)

func open(t *testing.T) store.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() }) // may already be closed
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, open) }

// TestModel runs memstore against itself: it cannot find disagreements,
// but it proves the model harness runs and that memstore never answers
// with unexpected errors or panics under random operation sequences.
func TestModel(t *testing.T) { storetest.RunModel(t, open) }

// TestLarge checks that memstore, the model for other backends, stays
// fast and ordered at 100k messages (it must not be quadratic).
func TestLarge(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	ctx := context.Background()
	s := memstore.New()
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 5))
	now := storetest.T0
	for b := 0; b < n; b += 1000 {
		msgs := make([]store.InsertMessage, 1000)
		for i := range msgs {
			msgs[i] = store.InsertMessage{ID: strconv.Itoa(b + i), DueAt: now + rng.Int64N(1_000_000) - 1000, MaxAttempts: 3}
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	end := now + 1_000_000
	for {
		r, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: end, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if r.Promoted == 0 {
			break
		}
	}
	var last *store.Record
	leased := 0
	for {
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: end, Max: 1000, LeaseFor: 1, Token: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if last != nil && (r.DueAt < last.DueAt || r.DueAt == last.DueAt && r.Seq < last.Seq) {
				t.Fatalf("lease order: %d/%d after %d/%d", r.DueAt, r.Seq, last.DueAt, last.Seq)
			}
			last = r
		}
		leased += len(recs)
	}
	if leased != n {
		t.Fatalf("leased %d of %d", leased, n)
	}
	exp, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: end + 1, Max: n})
	if err != nil || len(exp) != n {
		t.Fatalf("expired %d of %d: %v", len(exp), n, err)
	}
	storetest.EqualCounts(t, s, "t", store.Counts{Ready: int64(n)})
}
