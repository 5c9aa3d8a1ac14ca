package mysqlstore_test

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestUpgradeToPriority: tables of schema version 2 with messages in them
// migrate to the priority schema (again without harm after an
// interruption), the messages read as priority 0 and keep their order,
// the procedure <prefix>send of version 2 still sends (priority 0), and
// SendTx with a Priority goes through <prefix>send_priority.
func TestUpgradeToPriority(t *testing.T) {
	srv, prefix, db := oldSchema(t, 2)
	// Sent on schema 2: old-b (no delay) after old-a.
	for _, id := range []string{"old-a", "old-b"} {
		if _, err := db.Exec("CALL `"+prefix+"send`('t', ?, 'x', 0, 0, @i, @d, @u)", id); err != nil {
			t.Fatalf("send on schema 2: %v", err)
		}
	}

	migrateTwice(t, db, srv, prefix, 2)
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, Timeout: suiteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"old-a", "old-b"} {
		if r, err := s.MessageGet(ctx, "t", id); err != nil || r.Priority != 0 || r.State != store.StateReady {
			t.Fatalf("%s after the migration: %+v %v", id, r, err)
		}
	}
	if _, err := db.Exec("CALL `" + prefix + "send`('t', 'old-c', 'x', 0, 0, @i, @d, @u)"); err != nil {
		t.Fatalf("the procedure of schema 2 after the migration: %v", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mysqlstore.SendTx(ctx, tx, prefix, "t",
		mysqlstore.TxMessage{ID: "p200", Priority: 200}, mysqlstore.TxMessage{ID: "p1", Priority: 1}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.MessageGet(ctx, "t", "p200"); err != nil || r.Priority != 200 {
		t.Fatalf("p200: %+v %v", r, err)
	}
	want := []string{"old-a", "old-b", "old-c", "p1", "p200"}
	got, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 10, LeaseFor: 30_000, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("lease: %v, want %v", ids, want)
	}
	if _, err := db.Exec("CALL `" + prefix + "send_priority`('t', 'bad', 'x', 0, 0, 256, @i, @d, @u)"); err == nil || !strings.Contains(err.Error(), "priority") {
		t.Fatalf("send_priority 256: %v, want an error naming priority", err)
	}
}
