package pgstore_test

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/engine/enginetest"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// appConn is an application's own connection to the database.
func appConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return conn
}

// TestSendTxAtCommit: a message sent inside an application's transaction
// is invisible until the transaction commits, and then reaches a consumer
// long-polling on a running server at once (NOTIFY is delivered at
// commit), not at the next safety sweep.
func TestSendTxAtCommit(t *testing.T) {
	srv := pgtest.Shared(t)
	dep, schema := deploymentSchema(t)
	es := enginetest.Engines(t, dep, 1, engine.Config{})
	type leased struct {
		msgs []*domain.Message
		at   time.Time
		err  error
	}
	got := make(chan leased, 1)
	go func() {
		ms, err := es[0].Lease(ctx, "orders", domain.LeaseRequest{Max: 10, Wait: 10 * time.Second})
		got <- leased{ms, time.Now(), err}
	}()
	conn := appConn(t, srv.URL())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE app_orders (id text)"); err != nil { // the application's own write
		t.Fatal(err)
	}
	res, err := pgstore.SendTx(ctx, tx, schema, "orders", pgstore.TxMessage{ID: "o-1", Payload: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].ID != "o-1" || res[0].Duplicate {
		t.Fatalf("SendTx: %+v", res)
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case l := <-got:
		t.Fatalf("delivered before commit: %+v %v", l.msgs, l.err)
	default:
	}
	if _, err := es[0].Get(ctx, "orders", "o-1"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Get before commit: %v, want not found", err)
	}
	committed := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l.err != nil || len(l.msgs) != 1 || l.msgs[0].ID != "o-1" || string(l.msgs[0].Payload) != `{"n":1}` {
		t.Fatalf("lease: %+v %v", l.msgs, l.err)
	}
	d := l.at.Sub(committed)
	t.Logf("delivered %v after commit", d)
	if d > 3*time.Second {
		t.Fatalf("delivered %v after commit: by the safety sweep, not the notification", d)
	}
}

// TestSendTxRollback: a rolled-back send leaves nothing and announces
// nothing.
func TestSendTxRollback(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	notes, _, _, _ := subscribe(t, s)
	conn := appConn(t, srv.URL())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.SendTx(ctx, tx, s.Schema(), "t", pgstore.TxMessage{ID: "a"}, pgstore.TxMessage{ID: "b", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := s.MessageGet(ctx, "t", id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s after rollback: %v, want not found", id, err)
		}
	}
	select {
	case n := <-notes:
		t.Fatalf("notification %+v from a rolled-back send", n)
	case <-time.After(300 * time.Millisecond):
	}
	// The same ids are new afterwards.
	res, err := pgstore.SendTx(ctx, mustBegin(t, conn), s.Schema(), "t", pgstore.TxMessage{ID: "a"})
	if err != nil || res[0].Duplicate {
		t.Fatalf("send after rollback: %+v %v", res, err)
	}
}

func mustBegin(t *testing.T, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}

// TestSendTxRecords: what SendTx stores — payload, headers (the store's
// own encoding, built in SQL), due times on the database's clock, max
// attempts from the topic's settings — and that duplicates are answered,
// not sent.
func TestSendTxRecords(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	if err := s.TopicSettingsPut(ctx, "t", []byte(`{"max_attempts":7,"backoff":{}}`)); err != nil {
		t.Fatal(err)
	}
	conn := appConn(t, srv.URL())
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond).Add(300 * time.Microsecond)
	hdr := map[string]string{"content-type": "application/json", "ünï": "cödé", "empty": ""}
	before, _, _ := s.StoreNow(ctx)
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		res, err := pgstore.SendTx(ctx, tx, s.Schema(), "t",
			pgstore.TxMessage{ID: "h", Payload: []byte{0, 1, 2}, Headers: hdr, MaxAttempts: 3},
			pgstore.TxMessage{ID: "d", Delay: 1500*time.Millisecond + time.Microsecond},
			pgstore.TxMessage{ID: "at", DeliverAt: at},
			pgstore.TxMessage{}, // a generated id
			pgstore.TxMessage{ID: "h", Payload: []byte("again")},
		)
		if err != nil {
			return err
		}
		if res[3].ID == "" || !res[4].Duplicate || res[0].Duplicate || !res[4].DueAt.Equal(res[0].DueAt) {
			return fmt.Errorf("results %+v", res)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.MessageGet(ctx, "t", "h")
	if err != nil {
		t.Fatal(err)
	}
	if string(h.Payload) != "\x00\x01\x02" || !maps.Equal(h.Headers, hdr) || h.MaxAttempts != 3 || h.State != store.StateReady || h.CreatedAt < before {
		t.Errorf("h: %+v", *h)
	}
	d, err := s.MessageGet(ctx, "t", "d")
	if err != nil {
		t.Fatal(err)
	}
	if d.DueAt != d.CreatedAt+1501 || d.MaxAttempts != 7 || d.State != store.StateScheduled || d.Payload != nil {
		t.Errorf("d (delay 1.5 s + 1 µs, rounded up; the topic's max attempts): %+v", *d)
	}
	a, err := s.MessageGet(ctx, "t", "at")
	if err != nil {
		t.Fatal(err)
	}
	if a.DueAt != at.UnixMilli()+1 {
		t.Errorf("at: DueAt %d, want %d (deliver_at rounded up)", a.DueAt, at.UnixMilli()+1)
	}
	tr, err := s.TopicGet(ctx, "t")
	if err != nil || tr.Counts != (store.Counts{Scheduled: 2, Ready: 2}) {
		t.Fatalf("counts: %+v %v", tr, err)
	}
}

// TestDelayqSendNameBounds: a topic and an id of 200 characters are
// accepted by delayq_send and delayq_send_many (201 are refused: the
// Refuses tests), whatever the regular expressions that check them.
func TestDelayqSendNameBounds(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	conn := appConn(t, srv.URL())
	q := pgx.Identifier{s.Schema()}.Sanitize()
	topic := strings.Repeat("T", 199) + "-"
	one, many := strings.Repeat("i", 199)+"1", strings.Repeat("i", 199)+"2"
	if _, err := conn.Exec(ctx, "SELECT * FROM "+q+".delayq_send($1, $2, 'x', 60000)", topic, one); err != nil {
		t.Fatalf("delayq_send of 200-character names: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT * FROM "+q+".delayq_send_many($1, ARRAY[$2], ARRAY['y']::bytea[], ARRAY[60000::bigint])", topic, many); err != nil {
		t.Fatalf("delayq_send_many of 200-character names: %v", err)
	}
	for _, id := range []string{one, many} {
		if r, err := s.MessageGet(ctx, topic, id); err != nil || r.State != store.StateScheduled {
			t.Fatalf("%.10s…: %+v %v, want a scheduled message", id, r, err)
		}
	}
}

// TestNoLongBoundedRepetition: no function of the schema matches a
// regular expression with a bounded repetition of more than a few
// (x{1,200}): PostgreSQL expands it into that many copies and each match
// pays for them, ≈ 25 µs per check in delayq_send until schema 13.
// Write such a rule as a length check and an unbounded x+.
func TestNoLongBoundedRepetition(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	rows, err := adminPool(t, srv).Query(ctx, "SELECT p.proname, p.prosrc FROM pg_proc p WHERE p.pronamespace = $1::regnamespace", s.Schema())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	long := regexp.MustCompile(`\{[0-9]*,?[0-9]{2,}\}`)
	n := 0
	for rows.Next() {
		var name, src string
		if err := rows.Scan(&name, &src); err != nil {
			t.Fatal(err)
		}
		n++
		if m := long.FindString(src); m != "" {
			t.Errorf("function %s has the bounded repetition %s", name, m)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("read %d functions of schema %s, want the schema's", n, s.Schema())
	}
}

// TestDelayqSendRefuses: bad arguments get SQLSTATE 22023 and a message
// naming the argument; nothing is sent.
func TestDelayqSendRefuses(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	conn := appConn(t, srv.URL())
	q := pgx.Identifier{s.Schema()}.Sanitize() + ".delayq_send"
	wantRefused(t, conn, s, []refusal{
		{"SELECT * FROM " + q + "($1, 'a', NULL)", []any{"bad topic"}, "topic"},
		{"SELECT * FROM " + q + "(NULL, 'a', NULL)", nil, "topic"},
		{"SELECT * FROM " + q + "($1, 'a', NULL)", []any{strings.Repeat("t", 201)}, "topic"},
		{"SELECT * FROM " + q + "('', 'a', NULL)", nil, "topic"},
		{"SELECT * FROM " + q + "('t', $1, NULL)", []any{strings.Repeat("x", 201)}, "id"},
		{"SELECT * FROM " + q + "('t', 'a/b', NULL)", nil, "id"},
		{"SELECT * FROM " + q + "('t', '', NULL)", nil, "id"},
		{"SELECT * FROM " + q + "('t', $1, NULL)", []any{"a\n"}, "id"},
		{"SELECT * FROM " + q + "('t', 'é', NULL)", nil, "id"},
		{"SELECT * FROM " + q + "('t', 'a', $1)", []any{make([]byte, 1<<20+1)}, "payload"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, -1)", nil, "delay_ms"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, 315360000001)", nil, "delay_ms"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, 5, deliver_at => now())", nil, "either"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, deliver_at => '1960-01-01')", nil, "1970"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, deliver_at => now() + interval '11 years')", nil, "maximum delay"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, max_attempts => 0)", nil, "max_attempts"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, max_attempts => 1001)", nil, "max_attempts"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, headers => '[]')", nil, "headers"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, headers => '{\"k\": 1}')", nil, "headers"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, headers => '{\"\": \"v\"}')", nil, "headers"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, headers => '{\"a\\u0085b\": \"v\"}')", nil, "headers"},
		{"SELECT * FROM " + q + "('t', 'a', NULL, headers => $1)", []any{`{"k":"` + strings.Repeat("v", 8192) + `"}`}, "headers"},
	})
}

// TestDelayqSendGrant: an application role with USAGE on the schema and
// EXECUTE on delayq_send sends without any right on the tables
// (SECURITY DEFINER); other roles cannot call it.
func TestDelayqSendGrant(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	q := pgx.Identifier{s.Schema()}.Sanitize()
	adm := adminPool(t, srv)
	role, other := s.Schema()+"_app", s.Schema()+"_other"
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN", "CREATE ROLE " + other + " LOGIN",
		"GRANT USAGE ON SCHEMA " + q + " TO " + role + ", " + other,
		"GRANT EXECUTE ON FUNCTION " + q + ".delayq_send(text, text, bytea, bigint, jsonb, integer, timestamptz) TO " + role,
	} {
		if _, err := adm.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	url := func(user string) string {
		return strings.Replace(srv.URL(), pgtest.User+"@", user+"@", 1)
	}
	app := appConn(t, url(role))
	var dup bool
	if err := app.QueryRow(ctx, "SELECT duplicate FROM "+q+".delayq_send('t', 'a', 'x')").Scan(&dup); err != nil || dup {
		t.Fatalf("send as %s: %v %v", role, dup, err)
	}
	var pe *pgconn.PgError
	if _, err := app.Exec(ctx, "SELECT count(*) FROM "+q+".message"); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("%s reads the tables: %v, want permission denied", role, err)
	}
	if _, err := appConn(t, url(other)).Exec(ctx, "SELECT * FROM "+q+".delayq_send('t', 'b', 'x')"); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("a role without EXECUTE sends: %v, want permission denied", err)
	}
	if r, err := s.MessageGet(ctx, "t", "a"); err != nil || string(r.Payload) != "x" {
		t.Fatalf("the granted send: %v %v", r, err)
	}
}

// TestSendSQLTx: the database/sql variant, here through pgx's stdlib.
func TestSendSQLTx(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	db, err := sql.Open("pgx", srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pgstore.SendSQLTx(ctx, tx, s.Schema(), "t",
		pgstore.TxMessage{ID: "a", Payload: []byte("p"), Headers: map[string]string{"k": "v"}, Delay: time.Minute},
		pgstore.TxMessage{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || !res[1].Duplicate || time.Until(res[0].DueAt) < 50*time.Second {
		t.Fatalf("results %+v", res)
	}
	if _, err := s.MessageGet(ctx, "t", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("visible before commit: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := s.MessageGet(ctx, "t", "a")
	if err != nil || string(r.Payload) != "p" || r.Headers["k"] != "v" || r.State != store.StateScheduled {
		t.Fatalf("after commit: %+v %v", r, err)
	}
	// Headers that JSON cannot carry are refused before the database.
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback() //nolint:errcheck // rolled back on purpose
	if _, err := pgstore.SendSQLTx(ctx, tx2, s.Schema(), "t", pgstore.TxMessage{Headers: map[string]string{"k": "a\x00b"}}); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("NUL in a header value: %v", err)
	}
}

// TestSendTxNotifiesOnlyWhatIsDueSoon: a transactional send due within a
// minute notifies at commit; one due later does not (the servers' safety
// sweep arms it), so its commit does not queue behind other notifying
// commits. Commits' notifications arrive in commit order, so the first
// one after the far send's commit must be the near send's.
func TestSendTxNotifiesOnlyWhatIsDueSoon(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	notes, _, _, _ := subscribe(t, s)
	conn := appConn(t, srv.URL())
	commit := func(m pgstore.TxMessage) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pgstore.SendTx(ctx, tx, s.Schema(), "t", m); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commit(pgstore.TxMessage{ID: "in-2h", Delay: 2 * time.Hour})
	commit(pgstore.TxMessage{ID: "in-61s", Delay: 61 * time.Second})
	commit(pgstore.TxMessage{ID: "in-5s", Delay: 5 * time.Second})
	r, err := s.MessageGet(ctx, "t", "in-5s")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-notes:
		if n.topic != "t" || n.due != r.DueAt {
			t.Fatalf("first notification %+v, want the message due in 5 s (due %d): a later one notified", n, r.DueAt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification for the message due in 5 s")
	}
	for _, id := range []string{"in-2h", "in-61s"} {
		if _, err := s.MessageGet(ctx, "t", id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

// refusal is a call the send functions must refuse: SQLSTATE 22023 with a
// message naming want.
type refusal struct {
	sql  string
	args []any
	want string
}

// wantRefused runs each call and checks its refusal, then that none of
// them made topic "t".
func wantRefused(t *testing.T, conn *pgx.Conn, s *pgstore.Store, calls []refusal) {
	t.Helper()
	for _, c := range calls {
		_, err := conn.Exec(ctx, c.sql, c.args...)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, c.want) {
			t.Errorf("%s: %v, want SQLSTATE 22023 naming %s", c.sql, err, c.want)
		}
	}
	if _, err := s.TopicGet(ctx, "t"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("refused sends created the topic: %v", err)
	}
}
