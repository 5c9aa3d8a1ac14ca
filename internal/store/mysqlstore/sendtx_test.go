package mysqlstore_test

import (
	"bytes"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// storeAndApp opens a store on a fresh prefix of the shared server and an
// application's own connection pool to the same database; both close when
// t ends.
func storeAndApp(t *testing.T) (*mysqlstore.Store, *sql.DB, string) {
	t.Helper()
	srv := mysqltest.Shared(t)
	prefix := srv.NewPrefix()
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, Timeout: suiteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return s, db, prefix
}

// A message sent in the application's transaction exists iff it commits,
// with the counts and queue a server-side send would have made.
func TestSendTx(t *testing.T) {
	s, db, prefix := storeAndApp(t)

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

// SendTx writes its values into the statement (one round trip): any
// bytes of topic, id and payload arrive as given, a priority included.
func TestSendTxAnyBytes(t *testing.T) {
	s, db, prefix := storeAndApp(t)
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i)
	}
	topic, id := "it's a \\ topic", "id 'with' \"quotes\" \\ and \x00 \xff"
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := mysqlstore.SendTx(ctx, tx, prefix, topic,
		mysqlstore.TxMessage{ID: id, Payload: payload, MaxAttempts: 7, Priority: 3},
		mysqlstore.TxMessage{ID: "empty"})
	if err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if res[0].ID != id || res[0].Duplicate {
		t.Fatalf("results %+v", res)
	}
	r, err := s.MessageGet(ctx, topic, id)
	if err != nil || !bytes.Equal(r.Payload, payload) || r.MaxAttempts != 7 || r.Priority != 3 {
		t.Fatalf("MessageGet: %+v %v", r, err)
	}
	if r, err := s.MessageGet(ctx, topic, "empty"); err != nil || len(r.Payload) != 0 {
		t.Fatalf("MessageGet empty: %+v %v", r, err)
	}
}
