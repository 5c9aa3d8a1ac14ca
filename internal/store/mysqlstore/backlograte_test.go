package mysqlstore_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestBacklogMoveReport measures how fast a backlog that comes due at
// once is promoted (scheduled → ready) and, once leased, expired (→
// ready again), in calls of the engine's batch size (1,000), as
// docs/mysql.md reports. It runs only when DELAYQ_BACKLOG_MYSQL names a
// database (never the tests' own servers); the tables get the prefix
// delayq_backlog_, dropped before and after.
//
//	DELAYQ_BACKLOG_MYSQL=mysql://root@127.0.0.1:3306/test DELAYQ_BACKLOG_N=100000 \
//	  go test -count=1 -timeout 1h -run 'TestBacklogMoveReport$' -v ./internal/store/mysqlstore
func TestBacklogMoveReport(t *testing.T) {
	url := os.Getenv("DELAYQ_BACKLOG_MYSQL")
	if url == "" {
		t.Skip("set DELAYQ_BACKLOG_MYSQL to a database URL to run the backlog report")
	}
	n := envInt(t, "DELAYQ_BACKLOG_N", 100_000)
	dropPrefix(t, url, "delayq_backlog_")
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: url, Prefix: "delayq_backlog_", TimeSource: mysqlstore.TimeCaller, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer dropPrefix(t, url, "delayq_backlog_")
	const topic = "backlog"
	start := time.Now()
	for b := 0; b < n; b += 100 {
		var msgs []store.InsertMessage
		for i := b; i < min(b+100, n); i++ {
			msgs = append(msgs, store.InsertMessage{ID: "m" + strconv.Itoa(i), DueAt: 1000, MaxAttempts: 5, Payload: []byte("payload of a backlogged message")})
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 0, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d sent in %s", n, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	promoted, calls := 0, 0
	for promoted < n {
		calls++
		res, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: 2000, Max: 1000})
		if err != nil {
			t.Fatalf("promote after %d: %v", promoted, err)
		}
		if res.Promoted == 0 {
			t.Fatalf("promote after %d: none moved", promoted)
		}
		promoted += res.Promoted
	}
	d := time.Since(start)
	t.Logf("promotion: %d messages in %d calls, %s: %.0f messages/s", promoted, calls, d.Round(time.Millisecond), float64(promoted)/d.Seconds())

	for leased := 0; leased < n; {
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: 2000, Max: 100, LeaseFor: 1, Token: "k" + strconv.Itoa(leased)})
		if err != nil || len(recs) == 0 {
			t.Fatalf("lease after %d: %d, %v", leased, len(recs), err)
		}
		leased += len(recs)
	}
	start = time.Now()
	expired, calls := 0, 0
	for expired < n {
		calls++
		recs, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 3000, Max: 1000})
		if err != nil {
			t.Fatalf("expire after %d: %v", expired, err)
		}
		if len(recs) == 0 {
			t.Fatalf("expire after %d: none moved", expired)
		}
		expired += len(recs)
	}
	d = time.Since(start)
	t.Logf("lease expiry: %d messages in %d calls, %s: %.0f messages/s", expired, calls, d.Round(time.Millisecond), float64(expired)/d.Seconds())
}
