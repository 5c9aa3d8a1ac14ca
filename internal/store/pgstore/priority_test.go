package pgstore_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// oldRecCols are the rec columns a server of schema version 2 names.
const oldRecCols = "status, topic, id, seq, state, due_at, created_at, updated_at, deliveries, failures, max_attempts, last_error, receipt, lease_until, dead_at, acked_at, headers, payload"

// oldSchema is a fresh schema's name, quoted name, and the statements that
// create it at the version of the given migration files (applied by
// hand, as a build of that version did), for upgrade tests.
func oldSchema(t *testing.T, srv *pgtest.Server, files ...string) (schema, quoted string, stmts []string) {
	t.Helper()
	schema = srv.NewSchema()
	q := pgx.Identifier{schema}.Sanitize()
	stmts = []string{"CREATE SCHEMA " + q,
		"CREATE TABLE " + q + ".delayq_schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"}
	for _, f := range files {
		b, err := os.ReadFile("migrations/" + f + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, strings.NewReplacer("__SCHEMA__", q, "__CHANNEL__", schema+".notify").Replace(string(b)),
			"INSERT INTO "+q+".delayq_schema_version (version, name) VALUES ("+strings.TrimLeft(f[:4], "0")+", '"+f+"')")
	}
	return schema, q, stmts
}

// migrateFrom runs stmts (an old schema of version from, see oldSchema,
// and what the test writes on it) as the admin, then opens the store on
// it, which migrates it to this build's version.
func migrateFrom(t *testing.T, srv *pgtest.Server, adm *pgxpool.Pool, schema, q string, from int, stmts []string) *pgstore.Store {
	t.Helper()
	for _, st := range stmts {
		if _, err := adm.Exec(ctx, st); err != nil {
			t.Fatalf("schema %d: %.80s: %v", from, st, err)
		}
	}
	s, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var version int
	if err := adm.QueryRow(ctx, "SELECT max(version) FROM "+q+".delayq_schema_version").Scan(&version); err != nil || version != pgstore.SchemaVersion() || version <= from {
		t.Fatalf("schema version after Open: %d %v, want %d (above %d)", version, err, pgstore.SchemaVersion(), from)
	}
	return s
}

// TestUpgradeToPriority: a schema of version 2 with messages in it
// migrates to the priority schema without losing or reordering them
// (they read as priority 0), and what a server or application of version
// 2 calls — the 11-argument op_insert, the 7-argument delayq_send and its
// grant, op_lease by named columns — still works after the migration.
func TestUpgradeToPriority(t *testing.T) {
	srv := pgtest.Shared(t)
	adm := adminPool(t, srv)
	schema, q, stmts := oldSchema(t, srv, "0001_init", "0002_nack_final")
	role := schema + "_app"
	stmts = append(stmts, "CREATE ROLE "+role+" LOGIN", "GRANT USAGE ON SCHEMA "+q+" TO "+role,
		"GRANT EXECUTE ON FUNCTION "+q+".delayq_send(text, text, bytea, bigint, jsonb, integer, timestamptz) TO "+role)
	for _, s := range stmts {
		if _, err := adm.Exec(ctx, s); err != nil {
			t.Fatalf("schema 2: %.80s: %v", s, err)
		}
	}
	// Sent on schema 2: old-b is due before old-a.
	for _, s := range []string{
		"SELECT * FROM " + q + ".delayq_send('t', 'old-a', 'a')",
		"SELECT * FROM " + q + ".op_insert(NULL, 't', ARRAY['old-b'], ARRAY['b'::bytea], ARRAY[NULL::bytea], ARRAY[0::bigint], ARRAY[true], ARRAY[-1000::bigint], ARRAY[3], ARRAY[false], false)",
	} {
		if _, err := adm.Exec(ctx, s); err != nil {
			t.Fatalf("send on schema 2: %v", err)
		}
	}

	s, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if v := pgstore.SchemaVersion(); v < 3 {
		t.Fatalf("SchemaVersion %d, want 3 or later", v)
	}
	for _, id := range []string{"old-a", "old-b"} {
		if r, err := s.MessageGet(ctx, "t", id); err != nil || r.Priority != 0 || r.State != store.StateReady {
			t.Fatalf("%s after the migration: %+v %v", id, r, err)
		}
	}
	// After the migration: a priority 1 message due at once, a send of
	// the 11-argument op_insert (priority 0), and one through the
	// 7-argument delayq_send by the role granted it on schema 2.
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{
		{ID: "new-p1", Relative: true, MaxAttempts: 3, Priority: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Exec(ctx, "SELECT * FROM "+q+".op_insert(NULL, 't', ARRAY['old-c'], ARRAY['c'::bytea], ARRAY[NULL::bytea], ARRAY[0::bigint], ARRAY[true], ARRAY[0::bigint], ARRAY[3], ARRAY[false], false)"); err != nil {
		t.Fatalf("11-argument op_insert on schema 3: %v", err)
	}
	app := appConn(t, strings.Replace(srv.URL(), pgtest.User+"@", role+"@", 1))
	if _, err := app.Exec(ctx, "SELECT * FROM "+q+".delayq_send('t', 'old-d', 'd')"); err != nil {
		t.Fatalf("7-argument delayq_send by the role granted it on schema 2: %v", err)
	}
	var pe *pgconn.PgError
	if _, err := app.Exec(ctx, "SELECT * FROM "+q+".delayq_send('t', 'p', 'p', 0, NULL, NULL, NULL, 3)"); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("8-argument delayq_send without its grant: %v, want permission denied", err)
	}
	// A server of version 2 leases by named columns: priority 0 first,
	// each in (due, seq) order; the priority 1 message last.
	rows, err := adm.Query(ctx, "SELECT id FROM (SELECT "+oldRecCols+" FROM "+q+".op_lease(NULL, 't', 10, 30000, 'tok')) x")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old-b", "old-a", "old-c", "old-d", "new-p1"}; strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("lease after the migration: %v, want %v", ids, want)
	}
}

// TestDelayqSendPriority: the 8-argument delayq_send stores the priority
// (pgtx's Send uses it for Priority > 0) and refuses one outside 0-255.
func TestDelayqSendPriority(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	conn := appConn(t, srv.URL())
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := pgstore.SendTx(ctx, tx, s.Schema(), "t",
			pgstore.TxMessage{ID: "low", Priority: 9}, pgstore.TxMessage{ID: "default"}, pgstore.TxMessage{ID: "top", Priority: 255})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]uint8{"low": 9, "default": 0, "top": 255} {
		if r, err := s.MessageGet(ctx, "t", id); err != nil || r.Priority != want {
			t.Fatalf("%s: %+v %v, want priority %d", id, r, err, want)
		}
	}
	got, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 10, LeaseFor: 30000, Token: "x"})
	if err != nil || len(got) != 3 || got[0].ID != "default" || got[1].ID != "low" || got[2].ID != "top" {
		t.Fatalf("lease: %v %v", got, err)
	}
	q := pgx.Identifier{s.Schema()}.Sanitize()
	for _, bad := range []string{"256", "-1", "NULL"} {
		var pe *pgconn.PgError
		_, err := conn.Exec(ctx, "SELECT * FROM "+q+".delayq_send('t', 'bad', 'x', 0, NULL, NULL, NULL, "+bad+")")
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, "priority") {
			t.Errorf("priority %s: %v, want 22023 naming priority", bad, err)
		}
	}
}
