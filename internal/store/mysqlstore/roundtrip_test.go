package mysqlstore_test

import (
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestRoundTripsPerMove counts the statements (the server's Questions) of
// a send, a promote and a lease of one message on the database's clock, which is
// what a paced flow pays per message: the clock is read in the pick, and
// a promote reads no topic row (before: 12, 10, 4 and 5 statements,
// BEGIN and COMMIT included), and of an ack of the leased messages. A
// count flush is one upsert of the transaction's own stripe, a lease's
// pick locks and reads the message rows too, and an ack deletes message
// and queue rows in one statement, its tombstones reading the clock
// (before: send 8, promote 10, lease 9, ack 9). No other test runs beside it (none is parallel at the top
// level).
//
// It also counts round trips (commands the driver sends): a
// transaction's BEGIN goes with its first statement, the writes whose
// results nothing reads go together with the next statement or with the
// COMMIT (conntx, writeBatch), a due lease's two picks go in one query,
// and a send's clock is read by its first statement (the insert, or the
// lookup of the caller's id): a send is 3 round trips for its 8
// statements (5 for 9 with the caller's id), a due lease 3 for 9 (an
// empty one 3 for 5) and an ack 2 for 6, where each statement was one and
// a send read the clock in a round trip of its own.
func TestRoundTripsPerMove(t *testing.T) {
	var writes atomic.Int64
	mysqlstore.CountWrites(t, &writes)
	s := open(t, mysqlstore.TimeDB)
	var clock atomic.Int64
	clock.Store(1_000_000)
	s.SetTestClock(clock.Load)
	for _, id := range []string{"a", "b"} { // the first makes the topic's row, the second sees it
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "rt", Messages: []store.InsertMessage{{ID: id, DueAt: 1_000_010, MaxAttempts: 3}}}); err != nil {
			t.Fatal(err)
		}
	}
	// BEGIN goes with the first statement, and COMMIT with the queued
	// writes: one round trip fewer per transaction than statements would
	// take alone at least.
	trips := map[string]int64{
		"send of 1, id made by the engine": 3, "send of 1, the caller's id, due in 30 ms": 5,
		"due lease of 1 scheduled, next due read": 3, "ack of 2": 2, "empty due lease": 3,
		"promote of 2": 8, "lease of 2": 6, "empty lease": 2, "empty promote": 3,
	}
	count := func(what string, want int64, f func() error) {
		t.Helper()
		w0 := writes.Load()
		if n := statementsOf(t, what, f); n != want {
			t.Errorf("%s: %d statements, want %d", what, n, want)
		}
		wantTrips, ok := trips[what]
		if !ok {
			wantTrips = want // one statement per round trip
		}
		if n := writes.Load() - w0; n != wantTrips {
			t.Errorf("%s: %d round trips, want %d", what, n, wantTrips)
		}
	}
	count("send of 1, id made by the engine", 8, func() error {
		res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "rt", Messages: []store.InsertMessage{{ID: "01J0000000000000000000000G", Generated: true, DueAt: 1_000_020, MaxAttempts: 3}}})
		if err == nil && (res[0].Duplicate || res[0].Record.DueAt != 1_000_020 || res[0].Record.CreatedAt != 1_000_000 || res[0].Record.State != store.StateScheduled) {
			t.Errorf("send: %+v, want a new scheduled message due 1000020, created 1000000", res[0])
		}
		return err
	})
	clock.Store(1_000_010)
	count("promote of 2", 9, func() error {
		res, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "rt", Max: 10})
		if err == nil && (res.Promoted != 2 || res.Now != 1_000_010) {
			t.Errorf("promoted %d at %d, want 2 at 1000010", res.Promoted, res.Now)
		}
		return err
	})
	var leased []*store.Record
	count("lease of 2", 7, func() error {
		got, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "rt", Max: 10, LeaseFor: 1000, Token: "k"})
		if err == nil && (len(got) != 2 || got[0].LeaseUntil != 1_001_010) {
			t.Errorf("leased %d, want 2 until 1001010", len(got))
		}
		leased = got
		return err
	})
	count("ack of 2", 6, func() error {
		items := make([]store.AckItem, len(leased))
		for i, r := range leased {
			items[i] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
		}
		errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "rt", Items: items})
		if err == nil {
			err = errors.Join(errs...)
		}
		return err
	})
	count("empty lease", 3, func() error {
		got, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "rt", Max: 10, LeaseFor: 1000, Token: "k"})
		if err == nil && len(got) != 0 {
			t.Errorf("leased %d, want 0", len(got))
		}
		return err
	})
	count("empty promote", 4, func() error {
		res, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "rt", Max: 10})
		if err == nil && (res.Promoted != 0 || res.Now != 1_000_010) {
			t.Errorf("promoted %d at %d, want 0 at 1000010", res.Promoted, res.Now)
		}
		return err
	})
	// What servers call: a due lease takes the scheduled message straight
	// to inflight and reads the next due time, where a promotion and a
	// lease took 9 + 7 statements in two transactions.
	clock.Store(1_000_020)
	count("due lease of 1 scheduled, next due read", 9, func() error {
		res, err := s.MessageLeaseDueNext(ctx, &store.MessageLeaseParams{Topic: "rt", Max: 10, LeaseFor: 1000, Token: "k"})
		if err == nil && (len(res.Records) != 1 || res.NextDue != 0 || res.Now != 1_000_020) {
			t.Errorf("due lease: %d leased, next due %d, at %d; want 1, 0, 1000020", len(res.Records), res.NextDue, res.Now)
		}
		return err
	})
	count("empty due lease", 5, func() error {
		res, err := s.MessageLeaseDueNext(ctx, &store.MessageLeaseParams{Topic: "rt", Max: 10, LeaseFor: 1000, Token: "k"})
		if err == nil && (len(res.Records) != 0 || res.Now != 1_000_020) {
			t.Errorf("empty due lease: %d leased at %d, want 0 at 1000020", len(res.Records), res.Now)
		}
		return err
	})
	// The caller's id is looked up first: that lookup reads the clock.
	count("send of 1, the caller's id, due in 30 ms", 9, func() error {
		res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "rt", Messages: []store.InsertMessage{{ID: "order-1", Relative: true, Delay: 30, MaxAttempts: 3}}})
		if err == nil && (res[0].Duplicate || res[0].Record.DueAt != 1_000_050 || res[0].Record.State != store.StateScheduled) {
			t.Errorf("send: %+v, want a new scheduled message due 1000050", res[0])
		}
		return err
	})
	if r, err := s.MessageGet(ctx, "rt", "order-1"); err != nil || r.DueAt != 1_000_050 || r.CreatedAt != 1_000_020 || r.State != store.StateScheduled {
		t.Errorf("order-1 as stored: %+v, %v; want scheduled, due 1000050, created 1000020", r, err)
	}
}

// statementsOf counts the statements f makes (the server's Questions,
// less the one that reads them). No other test runs beside it (none is
// parallel at the top level).
func statementsOf(t *testing.T, what string, f func() error) int64 {
	t.Helper()
	questions := func() int64 {
		var name string
		var v int64
		if err := adminDB.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	q0 := questions()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return questions() - q0 - 1
}

// TestTopicListStatements: a topic list makes as many statements for 30
// topics as for 1 (each server lists every 5 s; it made 2 per topic),
// and lists each topic as TopicGet reads it: counts, settings,
// and the first entry of each queue.
func TestTopicListStatements(t *testing.T) {
	s := open(t, mysqlstore.TimeDB)
	list := func() (recs []*store.TopicRecord, n int64) {
		t.Helper()
		n = statementsOf(t, "TopicList", func() (err error) {
			recs, err = s.TopicList(ctx)
			return err
		})
		return recs, n
	}
	sendTo := func(topic, id string, delay int64) {
		t.Helper()
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Messages: []store.InsertMessage{{ID: id, Relative: true, Delay: delay, MaxAttempts: 3}}}); err != nil {
			t.Fatal(err)
		}
	}
	sendTo("t00", "a", 0)
	_, one := list()

	for i := 1; i < 30; i++ {
		topic := fmt.Sprintf("t%02d", i)
		sendTo(topic, "later", int64(i)*60_000) // scheduled
		sendTo(topic, "now", 0)                 // ready
		if i%3 == 0 {                           // one of them inflight
			if _, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Max: 1, LeaseFor: int64(i) * 1000, Token: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		if i%5 == 0 {
			if err := s.TopicSettingsPut(ctx, topic, []byte(topic)); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs, thirty := list()
	t.Logf("TopicList: %d statements for 1 topic, %d for 30, BEGIN and COMMIT included", one, thirty)
	if thirty != one {
		t.Errorf("TopicList of 30 topics: %d statements, of 1: %d; want the same", thirty, one)
	}
	if len(recs) != 30 {
		t.Fatalf("TopicList: %d topics, want 30", len(recs))
	}
	for i, r := range recs {
		if want := fmt.Sprintf("t%02d", i); r.Name != want {
			t.Fatalf("TopicList[%d] = %s, want %s (in name order)", i, r.Name, want)
		}
		got, err := s.TopicGet(ctx, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, got) {
			t.Errorf("TopicList's %s: %+v; TopicGet: %+v", r.Name, r, got)
		}
		if i > 0 && (r.NextDue == 0 || (r.OldestReady == 0) != (i%3 == 0) || (r.NextLeaseExpiry == 0) != (i%3 != 0) || (r.Settings != nil) != (i%5 == 0)) {
			t.Errorf("TopicList's %s: next due %d, oldest ready %d, next lease expiry %d, settings %q", r.Name, r.NextDue, r.OldestReady, r.NextLeaseExpiry, r.Settings)
		}
	}
}
