package pgstore_test

import (
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestUpgradeTombstoneReceipt: a schema of version 10 with a tombstone
// acked on it migrates to version 11 (tombstone gains a receipt column):
// the old tombstone survives, whole, with an empty receipt; a message
// leased on version 10 and acked after the migration keeps the receipt
// that acked it, and an ack retried with it is still a conflict in the
// store (the engine answers it).
func TestUpgradeTombstoneReceipt(t *testing.T) {
	srv := pgtest.Shared(t)
	adm := adminPool(t, srv)
	schema, q, stmts := oldSchema(t, srv, migrationFiles(t, 10)...)
	stmts = append(stmts,
		"SELECT * FROM "+q+".delayq_send('t', 'old', 'x')",
		"SELECT * FROM "+q+".delayq_send('t', 'later', 'y')",
		"SELECT * FROM "+q+".op_lease_due(NULL, 't', 2, 600000, 'tok')",
		"SELECT * FROM "+q+".op_ack_many(NULL, 't', ARRAY['old'], ARRAY['tok-1'])")
	for _, st := range stmts {
		if _, err := adm.Exec(ctx, st); err != nil {
			t.Fatalf("schema 10: %.80s: %v", st, err)
		}
	}
	before, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema, NoMigrate: true})
	if err == nil {
		_ = before.Close()
		t.Fatal("Open with NoMigrate on schema 10: no error")
	}

	s := migrateFrom(t, srv, adm, schema, q, 10, nil)

	old, err := s.MessageGet(ctx, "t", "old")
	if err != nil || old.State != store.StateAcked || old.Receipt != "" || old.LeaseUntil != 0 || old.Deliveries != 1 || old.AckedAt == 0 || old.Seq == 0 {
		t.Fatalf("tombstone of version 10 after the migration: %+v %v, want acked, no receipt", old, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "old", Receipt: "tok-1"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ack of the old tombstone: %v, want conflict", err)
	}

	// Leased on version 10, acked on 11.
	l, err := s.MessageGet(ctx, "t", "later")
	if err != nil || l.State != store.StateInflight || l.Receipt != "tok-1" {
		t.Fatalf("message leased on version 10: %+v %v", l, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "later", Receipt: l.Receipt}); err != nil {
		t.Fatal(err)
	}
	got, err := s.MessageGet(ctx, "t", "later")
	if err != nil || got.State != store.StateAcked || got.Receipt != "tok-1" || got.LeaseUntil != 0 || len(got.Payload) != 0 {
		t.Fatalf("acked on version 11: %+v %v, want acked with receipt tok-1", got, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "later", Receipt: l.Receipt}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second ack: %v, want conflict", err)
	}
	// A send of the acked id answers the tombstone, its receipt with it.
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{{ID: "later", Relative: true, MaxAttempts: 3}}})
	if err != nil || len(res) != 1 || !res[0].Duplicate || res[0].Record.State != store.StateAcked || res[0].Record.Receipt != "tok-1" {
		t.Fatalf("send of the acked id: %+v %v, want its tombstone as the duplicate", res, err)
	}
	want := store.Counts{Acked: 2}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("counts: %+v %v, want %+v", tr, err, want)
	}
}

// TestUpgradeFailedReceipt: a schema of version 13 with a message nacked
// on it migrates to version 14 (a failed delivery keeps its receipt): the
// message nacked before has none; one leased on version 13 and nacked
// after the migration keeps its receipt, which is still no lease (a
// second nack and an ack with it are conflicts in the store; the engine
// answers the retried nack).
func TestUpgradeFailedReceipt(t *testing.T) {
	srv := pgtest.Shared(t)
	adm := adminPool(t, srv)
	schema, q, stmts := oldSchema(t, srv, migrationFiles(t, 13)...)
	stmts = append(stmts,
		"SELECT * FROM "+q+".delayq_send('t', 'old', 'x')",
		"SELECT * FROM "+q+".delayq_send('t', 'later', 'y')",
		"SELECT * FROM "+q+".op_lease_due(NULL, 't', 2, 600000, 'tok')",
		"SELECT * FROM "+q+".op_nack(NULL, 't', 'old', 'tok-1', 3600000, convert_to('boom', 'UTF8'))")
	s := migrateFrom(t, srv, adm, schema, q, 13, stmts)

	old, err := s.MessageGet(ctx, "t", "old")
	if err != nil || old.State != store.StateScheduled || old.Receipt != "" || old.Failures != 1 || old.LastError != "boom" {
		t.Fatalf("message nacked on version 13: %+v %v, want scheduled, no receipt", old, err)
	}

	// Leased on version 13, nacked on 14.
	l, err := s.MessageGet(ctx, "t", "later")
	if err != nil || l.State != store.StateInflight || l.Receipt != "tok-1" {
		t.Fatalf("message leased on version 13: %+v %v", l, err)
	}
	nack := &store.MessageNackParams{Topic: "t", ID: "later", Receipt: l.Receipt, RetryDelay: 3_600_000, Error: "boom"}
	if _, err := s.MessageNack(ctx, nack); err != nil {
		t.Fatal(err)
	}
	got, err := s.MessageGet(ctx, "t", "later")
	if err != nil || got.State != store.StateScheduled || got.Receipt != "tok-1" || got.LeaseUntil != 0 || got.Failures != 1 {
		t.Fatalf("nacked on version 14: %+v %v, want scheduled with receipt tok-1", got, err)
	}
	if _, err := s.MessageNack(ctx, nack); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second nack: %v, want conflict", err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "later", Receipt: l.Receipt}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ack with the failed delivery's receipt: %v, want conflict", err)
	}
	if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "t", ID: "later", Receipt: l.Receipt, Error: "boom", Final: true}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("final nack with the failed delivery's receipt: %v, want conflict", err)
	}
	want := store.Counts{Scheduled: 2}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("counts: %+v %v, want %+v", tr, err, want)
	}
}
