package mysqlstore_test

import (
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// oldTombInsert is the tombstone insert of a server of schema 8, which
// names its columns and has no receipt.
const oldTombInsert = " (topic, id, seq, acked_at, due, created, deliveries, failures, max_attempts, last_error, priority) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

// TestUpgradeTombstoneReceipt: tables of schema version 8 with a
// tombstone in them migrate to schema 9 (again without harm after an
// interruption); the old tombstone reads with no receipt, as does one a
// server of schema 8 writes on schema 9 during a rolling upgrade, while
// an ack of this build (one or many) keeps its receipt, which MessageGet
// and a duplicate send answer. A second ack stays a conflict.
func TestUpgradeTombstoneReceipt(t *testing.T) {
	srv, prefix, db := oldSchema(t, 8)
	// Acked on schema 8.
	if _, err := db.Exec("INSERT INTO `"+prefix+"tombstone`"+oldTombInsert, "t", "old", 1, 1_000, 500, 400, 1, 0, 25, nil, 0); err != nil {
		t.Fatal(err)
	}

	migrateTwice(t, db, srv, prefix, 8)
	var typ, nullable string
	if err := db.QueryRow("SELECT column_type, is_nullable FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'receipt'", prefix+"tombstone").Scan(&typ, &nullable); err != nil || typ != "varbinary(255)" || nullable != "YES" {
		t.Fatalf("%stombstone.receipt: %q nullable %q, %v; want varbinary(255), nullable", prefix, typ, nullable, err)
	}
	// A server of schema 8 still acks on schema 9 (no receipt kept).
	if _, err := db.Exec("INSERT INTO `"+prefix+"tombstone`"+oldTombInsert, "t", "old8", 2, 1_000, 500, 400, 1, 0, 25, nil, 0); err != nil {
		t.Fatalf("a schema 8 server's ack on schema 9: %v", err)
	}

	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, TimeSource: mysqlstore.TimeCaller, Timeout: suiteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"old", "old8"} {
		r, err := s.MessageGet(ctx, "t", id)
		if err != nil || r.State != store.StateAcked || r.Receipt != "" || r.LeaseUntil != 0 || r.AckedAt != 1_000 {
			t.Fatalf("%s after the migration: %+v %v; want acked at 1000 with no receipt", id, r, err)
		}
	}

	// This build's acks keep the receipt: one (MessageAck), and a batch
	// (MessageAckMany).
	insert(t, s, "t", "one", "many-a", "many-b")
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: insNow, Max: 10, LeaseFor: 60_000, Token: "tok"})
	if err != nil || len(leased) != 3 {
		t.Fatalf("lease: %d records, %v; want 3", len(leased), err)
	}
	receipts := map[string]string{}
	var items []store.AckItem
	for _, r := range leased {
		receipts[r.ID] = r.Receipt
		if r.ID == "one" {
			if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: r.ID, Receipt: r.Receipt, Now: insNow + 1}); err != nil {
				t.Fatal(err)
			}
		} else {
			items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
		}
	}
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "t", Items: items, Now: insNow + 1})
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"one", "many-a", "many-b"} {
		r, err := s.MessageGet(ctx, "t", id)
		if err != nil || r.State != store.StateAcked || r.Receipt == "" || r.Receipt != receipts[id] || r.LeaseUntil != 0 {
			t.Fatalf("%s acked: %+v %v; want acked with the receipt %q", id, r, err, receipts[id])
		}
		// A send of the acked id answers the tombstone, receipt included.
		dup := insert(t, s, "t", id)[0]
		if !dup.Duplicate || dup.Record == nil || dup.Record.State != store.StateAcked || dup.Record.Receipt != receipts[id] {
			t.Errorf("send of acked %s: %+v (record %+v), want a duplicate with the receipt %q", id, dup, dup.Record, receipts[id])
		}
		// The store still answers a second ack 409 (the engine reads the
		// tombstone to answer a retry).
		if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: id, Receipt: receipts[id], Now: insNow + 2}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("second ack of %s: %v, want ErrConflict", id, err)
		}
	}
	errs, err = s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "t", Items: []store.AckItem{{ID: "many-a", Receipt: receipts["many-a"]}, {ID: "old", Receipt: "x-1"}}, Now: insNow + 2})
	if err != nil || len(errs) != 2 || !errors.Is(errs[0], store.ErrConflict) || !errors.Is(errs[1], store.ErrConflict) {
		t.Errorf("second AckMany: %v %v, want two conflicts", errs, err)
	}
	// A send of the old tombstone's id: a duplicate, no receipt.
	if dup := insert(t, s, "t", "old")[0]; !dup.Duplicate || dup.Record == nil || dup.Record.State != store.StateAcked || dup.Record.Receipt != "" {
		t.Errorf("send of old: %+v (record %+v), want a duplicate with no receipt", dup, dup.Record)
	}
}
