package pgstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestOperationsReadByKeyWhenPlannedSmall: the queue operations a server
// runs find each message they take or check by its primary key, however
// small the tables were when the server's connection planned them. A
// connection plans a function's statements at its first calls and keeps
// those plans until the tables are analyzed again. Here it runs every
// operation while the topic holds ten messages, then another connection
// fills the topic with thousands of scheduled, inflight and acked
// messages (autovacuum off: no ANALYZE renews the plans), and each
// operation on a few messages must still read a few dozen buffers. On
// schema version 9, whose joins and id lists read a topic's messages by
// its name alone and filtered them by id (or drove from every tombstone
// of the topic), the same run read 1,349 buffers for the send, 878 for
// the lease, 378 for the ack and 251 for the expiry — growing with the
// backlog — against 25, 80, 71 and 67.
func TestOperationsReadByKeyWhenPlannedSmall(t *testing.T) {
	_, q, server, filler := planSchema(t)
	const topic, n = "big", 3000
	fill := func(prefix string, count int, delayMS int64) {
		t.Helper()
		fillTopic(t, filler, q, topic, prefix, count, delayMS)
	}
	fill("first", 10, 3_600_000)

	send := func(id string) string {
		return fmt.Sprintf(`SELECT * FROM %s.op_insert(NULL, 'big', ARRAY['%s'], ARRAY['\x00'::bytea], ARRAY[NULL::bytea],
			ARRAY[0::bigint], ARRAY[true], ARRAY[0::bigint], ARRAY[25], ARRAY[false], false, ARRAY[0::smallint])`, q, id)
	}
	// sendMany sends the caller's ids in one call (the set-based insert,
	// then the tombstone check of schema 16), due after delayMS.
	sendMany := func(delayMS int, ids ...string) string {
		k := len(ids)
		return fmt.Sprintf(`SELECT * FROM %s.op_insert(NULL, 'big', ARRAY['%s'], array_fill('\x00'::bytea, ARRAY[%d]),
			array_fill(NULL::bytea, ARRAY[%d]), array_fill(0::bigint, ARRAY[%d]), array_fill(true, ARRAY[%d]),
			array_fill(%d::bigint, ARRAY[%d]), array_fill(25, ARRAY[%d]), array_fill(false, ARRAY[%d]), false,
			array_fill(0::smallint, ARRAY[%d]), false)`, q, strings.Join(ids, "','"), k, k, k, k, delayMS, k, k, k, k)
	}
	lease := func(token string, leaseMS int) string {
		return fmt.Sprintf("SELECT * FROM %s.op_lease_due(NULL, 'big', 100, %d, '%s')", q, leaseMS, token)
	}
	// ack acks ids leased with receipt (the lease's token, "-", the
	// message's delivery count).
	ack := func(receipt string, ids ...string) string {
		return fmt.Sprintf("SELECT * FROM %s.op_ack_many(NULL, 'big', ARRAY['%s']::text[], ARRAY['%s']::text[])",
			q, strings.Join(ids, "','"), strings.TrimSuffix(strings.Repeat(receipt+"','", len(ids)), "','"))
	}
	promote := fmt.Sprintf("SELECT * FROM %s.op_promote_grace(NULL, 'big', 100, 0)", q)
	expire := fmt.Sprintf("SELECT * FROM %s.op_expire(NULL, 100)", q)

	// The server's connection plans everything on the small topic: more
	// than five calls each, after which PostgreSQL may keep a generic plan.
	for i := range 7 {
		w := fmt.Sprintf("w%d", i)
		// Six at once and three at once take the set-based statements
		// of schema 15 (a lease of six or more, an ack of three or
		// more); one or two the statement-per-message loops.
		for _, x := range "abdfgh" {
			mustExec(t, server, send(w+string(x)))
		}
		mustExec(t, server, sendMany(0, w+"i", w+"j", w+"k"))
		mustExec(t, server, lease(w, 30000))
		mustExec(t, server, ack(w+"-1", w+"a", w+"b", w+"d"))
		mustExec(t, server, ack(w+"-1", w+"i", w+"j", w+"k"))
		mustExec(t, server, ack(w+"-1", w+"f", w+"g", w+"h"))
		mustExec(t, server, promote)
		// Six scheduled a millisecond ahead, promoted at once (the
		// set-based promotion), then leased and acked.
		mustExec(t, server, sendMany(1, w+"p1", w+"p2", w+"p3", w+"p4", w+"p5", w+"p6"))
		time.Sleep(5 * time.Millisecond)
		mustExec(t, server, promote)
		mustExec(t, server, lease(w+"p", 30000))
		mustExec(t, server, ack(w+"p-1", w+"p1", w+"p2", w+"p3", w+"p4", w+"p5", w+"p6"))
		mustExec(t, server, send(w+"c"))
		mustExec(t, server, lease(w+"x", 1))
		time.Sleep(5 * time.Millisecond)
		mustExec(t, server, expire)
		mustExec(t, server, lease(w+"y", 30000)) // wNc again, expired to ready
		mustExec(t, server, ack(w+"y-2", w+"c")) // its second delivery
	}

	// The backlog: n scheduled an hour ahead, n/3 inflight (leased for an
	// hour), n/3 acked.
	waitHorizon(t, filler)
	fill("later", n, 3_600_000)
	fill("done", n/3, 0)
	mustExec(t, filler, `SELECT count(*) FROM `+q+`.op_lease_due(NULL, $1, $2, 3600000, 'fill')`, topic, n/3)
	mustExec(t, filler, `WITH l AS (SELECT id, receipt FROM `+q+`.message WHERE topic = $1 AND state = 3)
		SELECT count(*) FROM `+q+`.op_ack_many(NULL, $1, ARRAY(SELECT id FROM l), ARRAY(SELECT receipt FROM l))`, topic)
	fill("busy", n/3, 0)
	mustExec(t, filler, `SELECT count(*) FROM `+q+`.op_lease_due(NULL, $1, $2, 3600000, 'busy')`, topic, n/3)
	var scheduled, inflight, tombs int
	if err := filler.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 3),
		(SELECT count(*) FROM `+q+`.tombstone WHERE topic = $1) FROM `+q+`.message WHERE topic = $1`, topic).Scan(&scheduled, &inflight, &tombs); err != nil {
		t.Fatal(err)
	}
	if scheduled != n+10 || inflight != n/3 || tombs < n/3 {
		t.Fatalf("backlog: %d scheduled, %d inflight, %d tombstones, want %d, %d, at least %d", scheduled, inflight, tombs, n+10, n/3, n/3)
	}

	// check fails when sql, on the server's connection, read more than a
	// few dozen shared buffers for each of the msgs messages it moves or
	// did not answer want rows.
	check := func(what, sql string, want, msgs int64) {
		t.Helper()
		checkBuffers(t, server, what, sql, want, 60+20*msgs)
	}
	// The fill's dead queue rows are passed once (and marked dead in the
	// index) by a first lease, as between two autovacuum visits of a
	// busy queue: a cost of the churn, not of the plans. A snapshot
	// another session took before the fill (a test before this one, an
	// autovacuum's ANALYZE) keeps them from being marked: the fill waits
	// for none to be held.
	mustExec(t, server, lease("t0", 30000))
	check("a send of 5 of the caller's ids in one call", sendMany(0, "n1", "n2", "n3", "n4", "n5"), 5, 5)
	mustExec(t, server, lease("t0b", 30000)) // n1…n5, out of the way
	check("a send of a caller's id (its tombstone looked up)", send("m1"), 1, 1)
	mustExec(t, server, send("m2"))
	mustExec(t, server, send("m3"))
	check("a lease of 3 due messages", lease("t1", 30000), 3, 3)
	check("an ack of those 3", ack("t1-1", "m3", "m1", "m2"), 3, 3)
	for i := 4; i <= 9; i++ {
		mustExec(t, server, send(fmt.Sprintf("m%d", i)))
	}
	check("a lease of 6 due messages", lease("t3", 30000), 6, 6)
	check("an ack of 2 of those", ack("t3-1", "m9", "m4"), 2, 2)
	check("an ack of the other 4", ack("t3-1", "m5", "m6", "m7", "m8"), 4, 4)
	check("a promotion with nothing due", promote, 1, 1)
	mustExec(t, server, sendMany(1, "p1", "p2", "p3", "p4", "p5", "p6"))
	time.Sleep(5 * time.Millisecond)
	check("a promotion of 6 due messages", promote, 1, 6)
	mustExec(t, server, lease("t4", 30000)) // p1…p6, out of the way
	mustExec(t, server, send("e1"))
	mustExec(t, server, send("e2"))
	mustExec(t, server, lease("t2", 1))
	time.Sleep(5 * time.Millisecond)
	check("an expiry of 2 ended leases", expire, 2, 2)
}

// checkBuffers runs sql on conn under EXPLAIN ANALYZE and fails when it
// read more than most shared buffers (a function's nested statements
// included) or did not answer want rows.
func checkBuffers(t *testing.T, conn *pgx.Conn, what, sql string, want, most int64) {
	t.Helper()
	var out string
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql).Scan(&out); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var plans []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
			Rows int64 `json:"Actual Rows"`
		}
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("%s: EXPLAIN answered %q: %v", what, out, err)
	}
	p := plans[0].Plan
	if p.Rows != want {
		t.Fatalf("%s answered %d rows, want %d", what, p.Rows, want)
	}
	t.Logf("%s: %d buffers", what, p.Hit+p.Read)
	if p.Hit+p.Read > most {
		t.Errorf("%s read %d buffers, want at most %d: it reads what the topic holds, not the rows it takes", what, p.Hit+p.Read, most)
	}
}

// fillTopic sends count messages (ids prefix1…, 1-byte payloads, due in
// delayMS) to topic of the schema q in one op_insert call on conn.
func fillTopic(t *testing.T, conn *pgx.Conn, q, topic, prefix string, count int, delayMS int64) {
	t.Helper()
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM `+q+`.op_insert(NULL, $1,
		ARRAY(SELECT $2 || g FROM generate_series(1, $3::int) g),
		array_fill('\x00'::bytea, ARRAY[$3::int]), array_fill(NULL::bytea, ARRAY[$3::int]),
		array_fill(0::bigint, ARRAY[$3::int]), array_fill(true, ARRAY[$3::int]), array_fill($4::bigint, ARRAY[$3::int]),
		array_fill(25, ARRAY[$3::int]), array_fill(false, ARRAY[$3::int]), false, array_fill(0::smallint, ARRAY[$3::int]))`,
		topic, prefix, count, delayMS); err != nil {
		t.Fatalf("fill %s: %v", prefix, err)
	}
}

// planSchema opens a store on a new schema of the shared server (which
// migrates it) and turns autovacuum off on its tables, so that only the
// test changes their statistics. It returns the schema's name, the name
// quoted for SQL, and two application connections: server, whose plans
// the test examines, and filler, which changes the tables meanwhile.
func planSchema(t *testing.T) (schema, q string, server, filler *pgx.Conn) {
	t.Helper()
	srv := pgtest.Shared(t)
	schema = srv.NewSchema()
	s, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	q = pgx.Identifier{schema}.Sanitize()
	server, filler = appConn(t, srv.URL()), appConn(t, srv.URL())
	for _, table := range []string{"message", "q_scheduled", "q_ready", "q_inflight", "q_dead", "tombstone", "topic_count"} {
		mustExec(t, filler, "ALTER TABLE "+q+"."+table+" SET (autovacuum_enabled = false)")
	}
	return schema, q, server, filler
}

// mustExec runs sql on conn and fails the test if it fails.
func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%.100s: %v", sql, err)
	}
}

// waitHorizon waits, up to a minute, until no other session of conn's
// database holds a snapshot, so that the rows the test deletes next are
// dead to all: an index scan marks their entries and passes them for
// good, and a vacuum removes them. Held across a fill, such a snapshot
// made a lease of 3 read 55 buffers more. Vacuums are not waited for:
// they hold back no one.
func waitHorizon(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var held []string
		if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(coalesce(backend_type, '') || ': ' || left(query, 60)), '{}')
			FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL
			  AND query !~* '^(autovacuum: )?vacuum' `).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("snapshots still held after a minute, going on: %q", held)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
