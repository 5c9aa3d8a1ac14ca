package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestQueueVacuumSteps: a step vacuums exactly the queue tables past
// their threshold, and only while the store is busy; a store whose role
// does not own the tables says so once and leaves them to autovacuum,
// its calls unaffected.
func TestQueueVacuumSteps(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Shared(t)
	schema := srv.NewSchema()
	s, err := Open(ctx, Options{URL: srv.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	vacuums := func(table string) (n int64) {
		t.Helper()
		// A fresh statistics snapshot at each read.
		if err := s.pool.QueryRow(ctx, "SELECT pg_stat_clear_snapshot(), vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2", schema, table).Scan(nil, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// n dead rows in q_scheduled only: sends due in an hour whose
	// q_scheduled rows are then deleted.
	const n = queueVacuumDead + 200
	deadScheduled := func(prefix string) {
		t.Helper()
		msgs := make([]store.InsertMessage, n)
		for i := range msgs {
			msgs[i] = store.InsertMessage{ID: fmt.Sprintf("%s%d", prefix, i), Relative: true, Delay: 3_600_000, MaxAttempts: 3}
		}
		for i := 0; i < n; i += 500 {
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: msgs[i:min(i+500, n)]}); err != nil {
				t.Fatal(err)
			}
		}
		deadTuples := func() (dead int64) {
			t.Helper()
			if err := s.pool.QueryRow(ctx, "SELECT pg_stat_clear_snapshot(), n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'q_scheduled'", schema).Scan(nil, &dead); err != nil {
				t.Fatal(err)
			}
			return dead
		}
		before := deadTuples()
		if _, err := s.pool.Exec(ctx, "DELETE FROM "+s.q+".q_scheduled"); err != nil {
			t.Fatal(err)
		}
		// The deleting session reports its statistics later.
		for range 300 { // an idle session's statistics come within 10 s
			if deadTuples() >= before+n {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("the deletes' dead tuples never showed in pg_stat_user_tables")
	}
	deadScheduled("a")

	v := newQueueVacuum(s)
	t.Cleanup(v.close)
	v.calls = s.calls.Load()
	v.busyAt = v.busyAt.AddDate(-1, 0, 0) // idle for long
	if err := v.step(ctx); err != nil || v.conn != nil {
		t.Fatalf("step of an idle store: %v, connected %v; want nothing done", err, v.conn != nil)
	}
	s.calls.Add(1) // a call
	if err := v.step(ctx); err != nil || v.off {
		t.Fatalf("step: %v (off %v)", err, v.off)
	}
	var vs, vr, vi int64
	for range 100 {
		if vs, vr, vi = vacuums("q_scheduled"), vacuums("q_ready"), vacuums("q_inflight"); vs > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if vs != 1 || vr != 0 || vi != 0 {
		t.Fatalf("vacuums after a step: q_scheduled %d, q_ready %d, q_inflight %d; want 1, 0, 0", vs, vr, vi)
	}
	// Under the threshold now: a second step vacuums nothing.
	clear(v.vacuumedAt) // as if a second had passed
	s.calls.Add(1)
	if err := v.step(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if vs := vacuums("q_scheduled"); vs != 1 {
		t.Fatalf("q_scheduled vacuumed %d times after a step under its threshold, want 1", vs)
	}

	// Not twice within queueVacuumGap, whatever the dead tuples.
	deadScheduled("c")
	v.vacuumedAt["q_scheduled"] = time.Now()
	s.calls.Add(1)
	if err := v.step(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if vs := vacuums("q_scheduled"); vs != 1 {
		t.Fatalf("q_scheduled vacuumed %d times by a step within %s of the last vacuum, want 1", vs, queueVacuumGap)
	}
	// A transaction that keeps a snapshot keeps the next dead rows: one
	// vacuum tries, the next step does not vacuum again for them.
	held, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	if _, err := held.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Exec(ctx, "SELECT count(*) FROM "+s.q+".message"); err != nil {
		t.Fatal(err)
	}
	deadScheduled("b")
	for i, want := range []int64{2, 2} {
		clear(v.vacuumedAt)
		s.calls.Add(1)
		if err := v.step(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if vs := vacuums("q_scheduled"); vs != want {
			t.Fatalf("q_scheduled vacuumed %d times after step %d with its dead tuples held by a transaction, want %d", vs, i+1, want)
		}
	}
	if _, err := held.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	// A role that may use the store but does not own its tables.
	role := schema + "_user"
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + s.q + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + s.q + " TO " + role,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + s.q + " TO " + role,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	var logs bytes.Buffer
	us, err := Open(ctx, Options{URL: u.String(), Schema: schema, NoMigrate: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = us.Close() })
	uv := newQueueVacuum(us)
	t.Cleanup(uv.close)
	us.calls.Add(1)
	if err := uv.step(ctx); err != nil || !uv.off || uv.conn != nil {
		t.Fatalf("step as a role that does not own the tables: %v, off %v, connected %v; want off", err, uv.off, uv.conn != nil)
	}
	if !strings.Contains(logs.String(), "left to autovacuum") {
		t.Fatalf("log: %q, want the tables said to be left to autovacuum", logs.String())
	}
	var msgs int
	if err := us.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "message"}.Sanitize()).Scan(&msgs); err != nil || msgs != 3*n {
		t.Fatalf("the role's own read: %d %v, want %d", msgs, err, 3*n)
	}
}
