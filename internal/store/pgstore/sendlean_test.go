package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// migrationFiles are the names of the migration files up to version n.
func migrationFiles(t *testing.T, n int) []string {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) < n {
		t.Fatalf("migration files: %v %v, want at least %d", files, err, n)
	}
	slices.Sort(files)
	out := make([]string, n)
	for i, f := range files[:n] {
		out[i] = strings.TrimSuffix(filepath.Base(f), ".sql")
	}
	return out
}

// sendAnswer is what one delayq_send call answered, and the
// notifications its commit sent.
type sendAnswer struct {
	id    string
	dup   bool
	due   int64  // ms
	err   string // SQLSTATE and message of a refusal
	notes []string
}

// callSend runs one delayq_send call (%s in call is the schema) on conn,
// which listens on the schema's channel, and collects the notifications
// its commit sent: a marker notification sent after it ends them, since a
// session hears the notifications of commits in commit order.
func callSend(t *testing.T, conn *pgx.Conn, schema, call string, args []any) sendAnswer {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	var a sendAnswer
	rows, err := conn.Query(ctx, fmt.Sprintf(call, q), args...)
	if err == nil {
		var n int
		for rows.Next() {
			n++
			var due time.Time
			if err := rows.Scan(&a.id, &a.dup, &due); err != nil {
				t.Fatal(err)
			}
			a.due = due.UnixMilli()
		}
		rows.Close()
		err = rows.Err()
		if err == nil && n != 1 {
			t.Fatalf("%s: %d rows, want 1", call, n)
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		a.err = pe.Code + " " + pe.Message
	} else if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_notify($1, 'mark')", schema+".notify"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a hang guard, not a timed assertion
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("%s: waiting for its notifications: %v", call, err)
		}
		if n.Payload == "mark" {
			return a
		}
		a.notes = append(a.notes, n.Payload)
	}
}

// dumpSchema is what a schema holds after the sends, as text, ordered by
// send order, with the generated ids replaced by gen (their format
// differs between versions, see TestDelayqSendLeanMatchesVersion8).
func dumpSchema(t *testing.T, conn *pgx.Conn, schema string, gen map[string]string) []string {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	var out []string
	for _, query := range []string{
		"SELECT x::text FROM (SELECT name, settings FROM %s.topic ORDER BY name) x",
		"SELECT x::text FROM (SELECT topic, id, state, due_at, created_at, updated_at, lease_until, dead_at, deliveries, failures, max_attempts, receipt, last_error, md5(headers), md5(payload), priority FROM %s.message ORDER BY seq) x",
		"SELECT x::text FROM (SELECT topic, due_at, id, priority FROM %s.q_ready ORDER BY seq) x",
		"SELECT x::text FROM (SELECT topic, due_at, id FROM %s.q_scheduled ORDER BY seq) x",
		"SELECT x::text FROM (SELECT topic, id, due_at, acked_at, max_attempts FROM %s.tombstone ORDER BY topic, id) x",
		"SELECT x::text FROM (SELECT topic, sum(scheduled), sum(ready), sum(inflight), sum(dead), sum(acked), count(*) FROM %s.topic_count GROUP BY topic ORDER BY topic) x",
	} {
		rows, err := conn.Query(ctx, fmt.Sprintf(query, q))
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			for id, name := range gen {
				l = strings.ReplaceAll(l, id, name)
			}
			out = append(out, l)
		}
		out = append(out, "--")
	}
	return out
}

// uuid7 is a generated id of version 9: a version 7 UUID.
var uuid7 = regexp.MustCompile(`^([0-9a-f]{8})-([0-9a-f]{4})-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestDelayqSendLeanMatchesVersion8: schema 9's delayq_send writes new
// messages itself instead of through op_insert. For every kind of
// argument the old function accepted — both forms, named arguments,
// defaults, deliver_at in the past and rounded up, headers, a topic's
// max_attempts, priorities, generated ids, repeats of an id, an acked id
// (tombstone), the limits — and every refusal (alone and with several bad
// arguments, where the first check wins), it answers what schema 8
// answers on the same clock, sends the same notifications, and leaves the
// same rows: messages, queue rows, counts, topics. Generated ids differ
// only in layout: version 7 UUIDs carrying the clock's milliseconds.
func TestDelayqSendLeanMatchesVersion8(t *testing.T) {
	srv := pgtest.Shared(t)
	adm := adminPool(t, srv)
	const now = int64(1_800_000_000_000) // 2027-01-15, the fake clock of both schemas
	at := func(ms int64) time.Time { return time.UnixMilli(now + ms) }
	conn := appConn(t, srv.URL())
	schemas := make([]string, 2)
	for i, files := range [][]string{migrationFiles(t, 8), migrationFiles(t, pgstore.SchemaVersion())} {
		schema, q, stmts := oldSchema(t, srv, files...)
		stmts = append(stmts,
			"INSERT INTO "+q+".topic (name, settings) VALUES ('set', convert_to('{\"max_attempts\":7}', 'UTF8'))",
			"INSERT INTO "+q+".tombstone (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts) VALUES ('t', 'acked', 0, 1799999990000, 1799999980000, 1799999995000, 1799999995000, 1, 0, 25)")
		for _, st := range stmts {
			if _, err := adm.Exec(ctx, st); err != nil {
				t.Fatalf("%.80s: %v", st, err)
			}
		}
		fakeClock(t, adm, schema)(now)
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{schema + ".notify"}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		schemas[i] = schema
	}

	long := strings.Repeat("i", 200)
	calls := []struct {
		call string
		args []any
	}{
		{"SELECT * FROM %s.delayq_send('t', 'a', 'pa', 5000)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'a', 'other', 0)", nil},                  // duplicate of a scheduled message
		{"SELECT * FROM %s.delayq_send('t', 'b', NULL)", nil},                        // due now, no payload
		{"SELECT * FROM %s.delayq_send('t', 'b', 'x', 0, NULL, NULL, NULL, 3)", nil}, // duplicate of a ready message
		{"SELECT * FROM %s.delayq_send('t', 'c', ''::bytea, 0, '{\"k\": \"v\", \"a\": \"b\"}')", nil},
		{"SELECT * FROM %s.delayq_send('t', 'd', 'x', NULL, 'null'::jsonb, NULL, NULL)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'e', 'x', 0, '{}'::jsonb, 1, $1)", []any{at(90_000)}},
		{"SELECT * FROM %s.delayq_send('t', 'f', 'x', 0, NULL, 1000, $1)", []any{at(-1_000)}},
		{"SELECT * FROM %s.delayq_send('t', 'g', 'x', deliver_at => $1)", []any{at(30_000).Add(400 * time.Microsecond)}},
		{"SELECT * FROM %s.delayq_send('t', 'h', 'x', NULL, NULL, NULL, $1, 0)", []any{at(59_000)}},
		{"SELECT * FROM %s.delayq_send('t', NULL, 'gen')", nil},
		{"SELECT * FROM %s.delayq_send('t', NULL, 'gen', 61000, NULL, NULL, NULL, 7)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'p255', 'x', 0, NULL, NULL, NULL, 255)", nil},
		{"SELECT * FROM %s.delayq_send('set', 's', 'x')", nil},
		{"SELECT * FROM %s.delayq_send('set', 's2', 'x', 0, NULL, 3)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'acked', 'x')", nil}, // the tombstone's duplicate
		{"SELECT * FROM %s.delayq_send('t', 'acked', 'x', 0, NULL, NULL, NULL, 1)", nil},
		{"SELECT * FROM %s.delayq_send('t', $1, 'x', 315360000000)", []any{long}},
		{"SELECT * FROM %s.delayq_send('t', 'n60', 'x', 60000)", nil}, // the first delay not notified
		{"SELECT * FROM %s.delayq_send('new.topic:1_-', 'A.b_c:d@e+f=g-', 'x', 59999)", nil},
		{"SELECT * FROM %s.delayq_send(topic => 't', id => 'named', payload => 'x', headers => '{\"h\": \"v\"}', max_attempts => 2)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'big', $1, 120000)", []any{make([]byte, 1<<20)}},
		{"SELECT * FROM %s.delayq_send('t', 'hmax', 'x', 0, $1)", []any{`{"k":"` + strings.Repeat("v", 8191) + `"}`}},

		{"SELECT * FROM %s.delayq_send($1, 'a', NULL)", []any{"bad topic"}},
		{"SELECT * FROM %s.delayq_send(NULL, 'a', NULL)", nil},
		{"SELECT * FROM %s.delayq_send('', 'a', NULL)", nil},
		{"SELECT * FROM %s.delayq_send('t', $1, NULL)", []any{long + "x"}},
		{"SELECT * FROM %s.delayq_send($1, 'a', 'x', 60000)", []any{long}},
		{"SELECT * FROM %s.delayq_send($1, 'a', NULL)", []any{long + "x"}},
		{"SELECT * FROM %s.delayq_send('t', $1, NULL)", []any{"a\n"}},
		{"SELECT * FROM %s.delayq_send('t', 'é', NULL)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'a/b', NULL)", nil},
		{"SELECT * FROM %s.delayq_send('t', '', NULL)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', $1)", []any{make([]byte, 1<<20+1)}},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, -1)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, 315360000001)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, 5, deliver_at => $1)", []any{at(0)}},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, deliver_at => '1960-01-01')", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, deliver_at => $1)", []any{at(315360000001)}},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, max_attempts => 0)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, max_attempts => 1001)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, headers => '[]')", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, headers => '\"s\"')", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, headers => '{\"k\": 1}')", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, headers => '{\"\": \"v\"}')", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, headers => '{\"a\\u0085b\": \"v\"}')", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, headers => $1)", []any{`{"k":"` + strings.Repeat("v", 8192) + `"}`}},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, 0, NULL, NULL, NULL, -1)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, 0, NULL, NULL, NULL, 256)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, 0, NULL, NULL, NULL, NULL)", nil},
		// Several bad arguments: the first check's message.
		{"SELECT * FROM %s.delayq_send('bad topic', 'a/b', NULL, -1, '[]', 0, NULL, 256)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'a/b', $1, -1, '[]', 0, NULL, 256)", []any{make([]byte, 1<<20+1)}},
		{"SELECT * FROM %s.delayq_send('t', 'z', $1, -1, '[]', 0, NULL, 256)", []any{make([]byte, 1<<20+1)}},
		{"SELECT * FROM %s.delayq_send('t', 'z', $1, -1, '[]', 0)", []any{make([]byte, 1<<20+1)}},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, -1, '[]', 0)", nil},
		{"SELECT * FROM %s.delayq_send('t', 'z', NULL, 0, '[]', 0)", nil},
		{"SELECT * FROM %s.delayq_send('t', NULL, NULL, 0, '[]', 1)", nil},
	}
	gens := []map[string]string{{}, {}}
	refused := 0
	for i, c := range calls {
		var ans [2]sendAnswer
		for j, schema := range schemas {
			ans[j] = callSend(t, conn, schema, c.call, c.args)
		}
		old, lean := ans[0], ans[1]
		if old.err != "" {
			refused++
			if !strings.HasPrefix(old.err, "22023 ") {
				t.Errorf("call %d on schema 8: %s, want a refusal (22023)", i, old.err)
			}
		}
		if old.id != lean.id && old.err == "" && strings.Contains(c.call, "NULL, 'gen'") {
			// Generated: schema 8's a random UUID, 9's a version 7 one
			// starting with the clock's milliseconds.
			m := uuid7.FindStringSubmatch(lean.id)
			if m == nil || m[1]+m[2] != fmt.Sprintf("%012x", now) {
				t.Errorf("call %d: generated id %q, want a version 7 UUID of ms %012x", i, lean.id, now)
			}
			name := fmt.Sprintf("gen-%d", i)
			gens[0][old.id], gens[1][lean.id] = name, name
			old.id, lean.id = name, name
		}
		if fmt.Sprint(old) != fmt.Sprint(lean) {
			t.Errorf("call %d: %.120s\nschema 8: %+v\nschema 9: %+v", i, c.call, old, lean)
		}
	}
	if refused < 20 || refused == len(calls) {
		t.Fatalf("%d of %d calls refused: the list lost its accepted or refused calls", refused, len(calls))
	}
	old, lean := dumpSchema(t, conn, schemas[0], gens[0]), dumpSchema(t, conn, schemas[1], gens[1])
	if len(old) < 30 {
		t.Fatalf("schema 8 holds only %d rows after the sends: %q", len(old), old)
	}
	if strings.Join(old, "\n") != strings.Join(lean, "\n") {
		t.Errorf("rows after the sends differ\nschema 8:\n%s\nschema 9:\n%s", strings.Join(old, "\n"), strings.Join(lean, "\n"))
	}
}

// TestUpgradeSendLean: a schema of version 8 with messages and grants
// migrates to version 9 (delayq_send replaced, both forms, the 7-argument
// one in another language): an application role keeps its EXECUTE grant
// on the 7-argument form and still has none on the 8-argument one, a role
// without grants still cannot call either (a dropped and recreated
// function would be PUBLIC's again), ids sent on version 8 are
// duplicates on 9, and counts go on from version 8's.
func TestUpgradeSendLean(t *testing.T) {
	srv := pgtest.Shared(t)
	adm := adminPool(t, srv)
	schema, q, stmts := oldSchema(t, srv, migrationFiles(t, 8)...)
	role, other := schema+"_app", schema+"_other"
	stmts = append(stmts, "CREATE ROLE "+role+" LOGIN", "CREATE ROLE "+other+" LOGIN",
		"GRANT USAGE ON SCHEMA "+q+" TO "+role+", "+other,
		"GRANT EXECUTE ON FUNCTION "+q+".delayq_send(text, text, bytea, bigint, jsonb, integer, timestamptz) TO "+role,
		"SELECT * FROM "+q+".delayq_send('t', 'later', 'x', 3600000)",
		"SELECT * FROM "+q+".delayq_send('t', 'now', 'x')")
	s := migrateFrom(t, srv, adm, schema, q, 8, stmts)
	app := appConn(t, strings.Replace(srv.URL(), pgtest.User+"@", role+"@", 1))
	sendAs := func(id string) (dup bool) {
		t.Helper()
		if err := app.QueryRow(ctx, "SELECT duplicate FROM "+q+".delayq_send('t', $1, 'y', 7200000)", id).Scan(&dup); err != nil {
			t.Fatalf("7-argument delayq_send of %s by the role granted it on schema 8: %v", id, err)
		}
		return dup
	}
	if !sendAs("later") || !sendAs("now") || sendAs("new") {
		t.Fatal("ids of version 8 are not duplicates on 9, or a new id is")
	}
	var pe *pgconn.PgError
	if _, err := app.Exec(ctx, "SELECT * FROM "+q+".delayq_send('t', 'p', 'p', 0, NULL, NULL, NULL, 3)"); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("8-argument delayq_send without its grant: %v, want permission denied", err)
	}
	noGrant := appConn(t, strings.Replace(srv.URL(), pgtest.User+"@", other+"@", 1))
	for _, call := range []string{"delayq_send('t', 'o', 'o')", "delayq_send('t', 'o', 'o', 0, NULL, NULL, NULL, 0)", "delayq_send_many('t', NULL, ARRAY['o'::bytea])"} {
		if _, err := noGrant.Exec(ctx, "SELECT * FROM "+q+"."+call); !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s by a role without grants: %v, want permission denied", call, err)
		}
	}
	if r, err := s.MessageGet(ctx, "t", "later"); err != nil || string(r.Payload) != "x" {
		t.Fatalf("the message of version 8 after the repeat: %+v %v", r, err)
	}
	want := store.Counts{Scheduled: 2, Ready: 1}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != want {
		t.Fatalf("counts: %+v %v, want %+v", tr, err, want)
	}
}

// TestGeneratedIDsAreVersion7: ids generated by delayq_send and
// delayq_send_many (schema 9) are version 7 UUIDs whose first 48 bits are
// the database clock's milliseconds at the send: delayq_send's are its
// message's created_at; delayq_send_many reads the clock again for the
// insert, so its are between the earlier sends' and the created_at.
func TestGeneratedIDsAreVersion7(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	conn := appConn(t, srv.URL())
	tx := mustBegin(t, conn)
	one, err := pgstore.SendTx(ctx, tx, s.Schema(), "t", pgstore.TxMessage{}, pgstore.TxMessage{Priority: 2})
	if err != nil {
		t.Fatal(err)
	}
	many, err := pgstore.SendManyTx(ctx, tx, s.Schema(), "t", pgstore.TxMessage{}, pgstore.TxMessage{ID: "given"}, pgstore.TxMessage{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var first int64
	for i, r := range append(one, many[0], many[2]) {
		m := uuid7.FindStringSubmatch(r.ID)
		if m == nil {
			t.Fatalf("generated id %d: %q, want a version 7 UUID", i, r.ID)
		}
		var ms int64
		if _, err := fmt.Sscanf(m[1]+m[2], "%x", &ms); err != nil {
			t.Fatal(err)
		}
		rec, err := s.MessageGet(ctx, "t", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ms
		}
		if ms > rec.CreatedAt || (i < 2 && ms != rec.CreatedAt) || ms < first {
			t.Errorf("generated id %d: %q carries ms %d, the message was created at %d, the first send at %d", i, r.ID, ms, rec.CreatedAt, first)
		}
	}
}
