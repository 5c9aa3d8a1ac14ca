package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestSendCountsByInsert (schema 8): a send writes its count as a row of
// its own — an insert, no update of (nor lock on) a counter stripe that
// other transactions use — and the counts stay exact; TopicList folds a
// topic's rows back into one once there are many.
func TestSendCountsByInsert(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	admin := adminPool(t, srv)
	rows := func() (n int) {
		t.Helper()
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+s.Schema()+".topic_count WHERE topic = 't'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	send(t, s, "t", "first", 0) // the topic and a counter row exist

	// Three delayq_send calls in one application transaction: what they
	// wrote to topic_count, from the transaction's own statistics.
	conn := appConn(t, srv.URL())
	tx := mustBegin(t, conn)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := pgstore.SendTx(ctx, tx, s.Schema(), "t", pgstore.TxMessage{ID: id, Delay: 3_600_000_000_000}); err != nil {
			t.Fatal(err)
		}
	}
	var ins, upd int64
	if err := tx.QueryRow(ctx, "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE schemaname = $1 AND relname = 'topic_count'",
		s.Schema()).Scan(&ins, &upd); err != nil {
		t.Fatal(err)
	}
	if ins != 3 || upd != 0 {
		t.Fatalf("topic_count rows written by 3 sends: %d inserted, %d updated; want 3 inserted, 0 updated", ins, upd)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A batch is one row, whatever its size.
	batch := make([]store.InsertMessage, 5)
	for i := range batch {
		batch[i] = store.InsertMessage{ID: "batch-" + string(rune('a'+i)), Relative: true, MaxAttempts: 3}
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: batch}); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 5 {
		t.Fatalf("count rows: %d, want 5 (the server's send, three from the transaction, one for the batch)", n)
	}
	want := store.Counts{Scheduled: 3, Ready: 6}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("counts: %+v %v, want %+v", tr, err, want)
	}

	// Past countFoldAfter rows, a topic list folds them into one.
	for i := range 300 {
		send(t, s, "t", "m"+string(rune('a'+i%26))+string(rune('a'+i/26)), 3_600_000)
	}
	want.Scheduled += 300
	if n := rows(); n != 305 {
		t.Fatalf("count rows before the fold: %d, want 305", n)
	}
	trs, err := s.TopicList(ctx)
	if err != nil || len(trs) != 1 || trs[0].Counts != want {
		t.Fatalf("TopicList: %v %v, want one topic with %+v", trs, err, want)
	}
	if n := rows(); n != 1 {
		t.Fatalf("count rows after TopicList: %d, want 1", n)
	}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("counts after the fold: %+v %v, want %+v", tr, err, want)
	}
	// Leases and acks still count on the folded row.
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 2, LeaseFor: 60_000, Token: "k"})
	if err != nil || len(recs) != 2 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: recs[0].ID, Receipt: recs[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	want.Ready, want.Inflight, want.Acked = want.Ready-2, 1, 1
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("counts after lease and ack: %+v %v, want %+v", tr, err, want)
	}
}

// TestSubscribedStoreFolds: a server's store (subscribed to
// notifications) folds a busy topic's count rows every second on its
// own (its topic lists then skip theirs: TestFoldOncePerPeriod); counts
// stay exact.
func TestSubscribedStoreFolds(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	admin := adminPool(t, srv)
	rows := func() (n int) {
		t.Helper()
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+s.Schema()+".topic_count WHERE topic = 'busy'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sendMany := func(prefix string, n int) {
		for i := range n {
			send(t, s, "busy", fmt.Sprintf("%s-%d", prefix, i), 3_600_000)
		}
	}
	sendMany("a", 300)
	if n := rows(); n != 300 {
		t.Fatalf("count rows before subscribing: %d, want 300", n)
	}

	sctx, cancel := context.WithCancel(ctx)
	subscribed := make(chan error, 1)
	go func() { subscribed <- s.Subscribe(sctx, nil, func(string, int64) {}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-subscribed; !errors.Is(err, context.Canceled) {
			t.Errorf("Subscribe: %v, want context.Canceled", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for rows() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("count rows 10 s after subscribing: %d, want 1 (folded by the store itself)", rows())
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := store.Counts{Scheduled: 300}
	if tr, err := s.TopicGet(ctx, "busy"); err != nil || tr.Counts != want {
		t.Fatalf("counts after the store's fold: %+v %v, want %+v", tr, err, want)
	}

}

// A schema of version 7 with counts in its stripes migrates to version 8
// with the counts unchanged, and sends, leases and acks after the
// migration count on top of them.
func TestUpgradeCountsToInsert(t *testing.T) {
	srv := pgtest.Shared(t)
	adm := adminPool(t, srv)
	schema, q, stmts := oldSchema(t, srv, "0001_init", "0002_nack_final", "0003_priority", "0004_queue_plans", "0005_notify_soon", "0006_send_setwise", "0007_lease_due")
	// Sent on schema 7: two due later, three due now, one of which is
	// then leased and acked — all through the schema's own functions.
	stmts = append(stmts,
		"SELECT * FROM "+q+".delayq_send('t', 'later-1', 'x', 3600000)",
		"SELECT * FROM "+q+".delayq_send('t', 'later-2', 'x', 3600000)",
		"SELECT * FROM "+q+".delayq_send('t', 'now-1', 'x')",
		"SELECT * FROM "+q+".delayq_send('t', 'now-2', 'x')",
		"SELECT * FROM "+q+".delayq_send('t', 'now-3', 'x')")
	for _, st := range stmts {
		if _, err := adm.Exec(ctx, st); err != nil {
			t.Fatalf("schema 7: %.80s: %v", st, err)
		}
	}

	s, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	want := store.Counts{Scheduled: 2, Ready: 3}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("counts after the migration: %+v %v, want %+v", tr, err, want)
	}
	send(t, s, "t", "after-later", 3_600_000)
	send(t, s, "t", "after-now", 0)
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 2, LeaseFor: 60_000, Token: "tok"})
	if err != nil || len(leased) != 2 {
		t.Fatalf("lease: %d, %v", len(leased), err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: leased[0].ID, Receipt: leased[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	want = store.Counts{Scheduled: 3, Ready: 2, Inflight: 1, Acked: 1}
	trs, err := s.TopicList(ctx) // folds
	if err != nil || len(trs) != 1 || trs[0].Counts != want {
		t.Fatalf("TopicList after sends, a lease and an ack on version 8: %v %v, want one topic with %+v", trs, err, want)
	}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("TopicGet after the fold: %+v %v, want %+v", tr, err, want)
	}
}
