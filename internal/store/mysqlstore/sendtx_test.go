package mysqlstore_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// A message sent in the application's transaction exists iff it commits,
// with the counts and queue a server-side send would have made.
func TestSendTx(t *testing.T) {
	srv := mysqltest.Shared(t)
	prefix := srv.NewPrefix()
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, Timeout: suiteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mysqlstore.SendTx(ctx, tx, prefix, "orders", mysqlstore.TxMessage{ID: "rolled-back", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageGet(ctx, "orders", "rolled-back"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rolled-back send: MessageGet = %v, want ErrNotFound", err)
	}

	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := mysqlstore.SendTx(ctx, tx, prefix, "orders",
		mysqlstore.TxMessage{ID: "now", Payload: []byte("{}")},
		mysqlstore.TxMessage{ID: "later", Delay: time.Hour, MaxAttempts: 3},
		mysqlstore.TxMessage{Payload: []byte("generated id")},
		mysqlstore.TxMessage{ID: "now"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || res[1].Duplicate || res[2].Duplicate || !res[3].Duplicate || res[2].ID == "" || res[3].DueAt != res[0].DueAt {
		t.Fatalf("results %+v", res)
	}
	if d := res[1].DueAt.Sub(res[0].DueAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Fatalf("delayed message due %v after the immediate one, want 1h", d)
	}
	r, err := s.MessageGet(ctx, "orders", "now")
	if err != nil || r.State != store.StateReady || string(r.Payload) != "{}" || r.MaxAttempts != 25 {
		t.Fatalf("MessageGet now: %+v %v", r, err)
	}
	r, err = s.MessageGet(ctx, "orders", "later")
	if err != nil || r.State != store.StateScheduled || r.MaxAttempts != 3 {
		t.Fatalf("MessageGet later: %+v %v", r, err)
	}
	tr, err := s.TopicGet(ctx, "orders")
	if err != nil || tr.Counts.Ready != 2 || tr.Counts.Scheduled != 1 || tr.NextDue != r.DueAt {
		t.Fatalf("TopicGet: %+v %v", tr, err)
	}
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "orders", Max: 10, LeaseFor: 30_000, Token: "t"})
	if err != nil || len(leased) != 2 {
		t.Fatalf("lease: %d messages, %v; want the 2 ready ones", len(leased), err)
	}

	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // after the error below
	if _, err := mysqlstore.SendTx(ctx, tx, prefix, "", mysqlstore.TxMessage{ID: "x"}); err == nil {
		t.Fatal("send to an empty topic: no error")
	}
}
