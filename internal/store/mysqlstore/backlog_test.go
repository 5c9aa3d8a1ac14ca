package mysqlstore_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// TestBacklogMovesInParts: a backlog of due messages, and of expired
// leases, too big to move within one call's time bound (the shape a
// database outage under load leaves) is moved over several calls, each
// of which succeeds. Before calls were budgeted, every call timed out
// and rolled back the whole batch, again and again.
func TestBacklogMovesInParts(t *testing.T) {
	const n = 2500 // ≈ 1.7 s of moves on an idle test machine: over the 1 s bound
	srv := mysqltest.Shared(t)
	prefix := srv.NewPrefix()
	openWith := func(timeout time.Duration) *mysqlstore.Store {
		s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, TimeSource: mysqlstore.TimeCaller, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
				t.Error(err)
			}
		})
		return s
	}
	setup, tight := openWith(15*time.Second), openWith(time.Second)
	for b := 0; b < n; b += 500 {
		var msgs []store.InsertMessage
		for i := b; i < b+500; i++ {
			msgs = append(msgs, store.InsertMessage{ID: "m" + strconv.Itoa(i), DueAt: 1000, MaxAttempts: 3})
		}
		if _, err := setup.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: 0, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	promoted, calls := 0, 0
	for promoted < n && calls < 200 {
		calls++
		res, err := tight.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: 2000, Max: n})
		if err != nil {
			t.Fatalf("promote call %d, after %d of %d promoted: %v", calls, promoted, n, err)
		}
		promoted += res.Promoted
	}
	t.Logf("%d promoted in %d calls", promoted, calls)
	if promoted != n {
		t.Fatalf("%d of %d promoted in %d calls", promoted, n, calls)
	}

	for leased := 0; leased < n; {
		recs, err := setup.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: 2000, Max: 500, LeaseFor: 1, Token: "k"})
		if err != nil || len(recs) == 0 {
			t.Fatalf("lease after %d: %d, %v", leased, len(recs), err)
		}
		leased += len(recs)
	}
	expired, calls := 0, 0
	for expired < n && calls < 200 {
		calls++
		recs, err := tight.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 3000, Max: n})
		if err != nil {
			t.Fatalf("expire call %d, after %d of %d expired: %v", calls, expired, n, err)
		}
		expired += len(recs)
	}
	t.Logf("%d expired in %d calls", expired, calls)
	if expired != n {
		t.Fatalf("%d of %d expired in %d calls", expired, n, calls)
	}
}
