package mysqlstore_test

import (
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// TestUpgradeToPriority: tables of schema version 2 with messages in them
// migrate to the priority schema (again without harm after an
// interruption), the messages read as priority 0 and keep their order,
// the procedure <prefix>send of version 2 still sends (priority 0), and
// SendTx with a Priority goes through <prefix>send_priority.
func TestUpgradeToPriority(t *testing.T) {
	srv := mysqltest.Shared(t)
	prefix := srv.NewPrefix()
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stmts := []string{"CREATE TABLE `" + prefix + "schema_version` (version INT NOT NULL PRIMARY KEY, applied TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB"}
	for v, f := range []string{"0001_init", "0002_send"} {
		b, err := os.ReadFile("migrations/" + f + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range strings.Split(string(b), "\n--;\n") {
			if st = strings.TrimSpace(strings.ReplaceAll(st, "{{p}}", prefix)); st != "" {
				stmts = append(stmts, st)
			}
		}
		stmts = append(stmts, "INSERT INTO `"+prefix+"schema_version` (version) VALUES ("+string(rune('1'+v))+")")
	}
	for _, st := range stmts {
		if _, err := db.Exec(st); err != nil {
			t.Fatalf("schema 2: %.80s: %v", st, err)
		}
	}
	// Sent on schema 2: old-b (no delay) after old-a.
	for _, id := range []string{"old-a", "old-b"} {
		if _, err := db.Exec("CALL `"+prefix+"send`('t', ?, 'x', 0, 0, @i, @d, @u)", id); err != nil {
			t.Fatalf("send on schema 2: %v", err)
		}
	}

	for round := range 2 {
		if round == 1 {
			// As if the migration stopped before writing its version: it
			// runs again over the columns and index it already made.
			if _, err := db.Exec("DELETE FROM `" + prefix + "schema_version` WHERE version >= 3"); err != nil {
				t.Fatal(err)
			}
		}
		from, to, err := mysqlstore.Migrate(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix})
		if err != nil || from != 2 || to != mysqlstore.SchemaVersion() || to < 3 {
			t.Fatalf("round %d: Migrate %d -> %d, %v; SchemaVersion %d", round, from, to, err, mysqlstore.SchemaVersion())
		}
	}
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
