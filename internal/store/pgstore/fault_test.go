package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

const faultTimeout = time.Second

// failsWithin runs fn and wants an error wrapping store.ErrUnavailable —
// and no context error: the caller's ctx did not end — within limit.
func failsWithin(t *testing.T, what string, limit time.Duration, fn func() error) {
	t.Helper()
	start := time.Now()
	err := fn()
	d := time.Since(start)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("%s: %v, want ErrUnavailable", what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("%s: %v: a context error, but the caller's ctx did not end", what, err)
	}
	if d > limit {
		t.Errorf("%s took %v, want < %v", what, d, limit)
	}
	t.Logf("%s: %v after %v", what, err, d.Round(time.Millisecond))
}

// calls are one of each kind of call, on topic t.
func calls(s *pgstore.Store) map[string]func() error {
	now := time.Now().UnixMilli()
	return map[string]func() error{
		"send": func() error {
			_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now,
				Messages: []store.InsertMessage{{ID: "x", Relative: true, MaxAttempts: 3}}})
			return err
		},
		"get": func() error { _, err := s.MessageGet(ctx, "t", "a"); return err },
		"lease": func() error {
			_, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 1, LeaseFor: 1000, Token: "k"})
			return err
		},
		"promote": func() error {
			_, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Max: 1})
			return err
		},
		"ack":    func() error { return s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "a", Receipt: "r"}) },
		"expire": func() error { _, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Max: 10}); return err },
		"topics": func() error { _, err := s.TopicList(ctx); return err },
		"clock":  func() error { _, _, err := s.StoreNow(ctx); return err },
	}
}

// TestUnreachable: a database that refuses connections, or that accepts
// them and never answers (SIGSTOP), makes every call fail with
// ErrUnavailable within about Options.Timeout; the store works again when
// the database is back.
func TestUnreachable(t *testing.T) {
	srv := pgtest.Start(t)
	s := openAt(t, srv, func(o *pgstore.Options) { o.Timeout = faultTimeout })
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t",
		Messages: []store.InsertMessage{{ID: "a", Relative: true, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	limit := 3 * faultTimeout // the bound, plus the time the driver takes to give up a connection
	srv.Pause(t)
	for name, fn := range calls(s) {
		failsWithin(t, name+" while the database hangs", limit, fn)
	}
	srv.Resume(t)
	recovers(t, s)
	srv.Stop()
	for name, fn := range calls(s) {
		failsWithin(t, name+" while the database is down", limit, fn)
	}
	srv.Restart(t)
	recovers(t, s)
}

func recovers(t *testing.T, s *pgstore.Store) {
	t.Helper()
	var err error
	for range 50 {
		if _, err = s.MessageGet(ctx, "t", "a"); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("after the database came back: %v", err)
}

// TestOpenUnreachable: Open fails fast with ErrUnavailable, and its error
// names no password.
func TestOpenUnreachable(t *testing.T) {
	start := time.Now()
	_, err := pgstore.Open(ctx, pgstore.Options{URL: "postgres://u:s3cret-pw@127.0.0.1:1/db", Timeout: faultTimeout})
	if !errors.Is(err, store.ErrUnavailable) || strings.Contains(err.Error(), "s3cret-pw") || time.Since(start) > 3*faultTimeout {
		t.Fatalf("Open: %v after %v", err, time.Since(start))
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error on several lines: %q", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db":                       "postgres://u:xxxxx@h:5432/db",
		"postgresql://u:p%40w@h/db?sslmode=require":       "postgresql://u:xxxxx@h/db?sslmode=require",
		"postgres://u:a/b@c@h/db":                         "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=pw&sslpassword=x":     "postgres://u@h/db?password=xxxxx&sslpassword=xxxxx",
		"postgres://h/db":                                 "postgres://h/db",
		"host=h user=u password=pw dbname=d":              "host=h user=u password=xxxxx dbname=d",
		"host=h password='p w\\' x' dbname=d":             "host=h password=xxxxx dbname=d",
		"host=h password = pw":                            "host=h password = xxxxx",
		"postgres://u:pw@h1:5432,h2:5433/db?target=any#f": "postgres://u:xxxxx@h1:5432,h2:5433/db?target=any#f",
	} {
		if got := pgstore.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMigrateConcurrently: servers starting together migrate once (the
// advisory lock), and all of them work on the result.
func TestMigrateConcurrently(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.NewSchema()
	var wg sync.WaitGroup
	stores := make([]*pgstore.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema}) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = s.Close() })
	}
	var n int
	if err := adminPool(t, srv).QueryRow(ctx, "SELECT count(*) FROM "+schema+".delayq_schema_version").Scan(&n); err != nil || n != pgstore.SchemaVersion() {
		t.Fatalf("version rows: %d %v, want %d", n, err, pgstore.SchemaVersion())
	}
	if _, err := stores[3].MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t",
		Messages: []store.InsertMessage{{ID: "a", Relative: true, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
}

// TestNoMigrate: with NoMigrate, Open refuses a schema that is missing,
// older or newer than this build, and accepts one at its version.
func TestNoMigrate(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.NewSchema()
	open := func() error {
		s, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema, NoMigrate: true})
		if err == nil {
			_ = s.Close()
		}
		return err
	}
	if err := open(); err == nil || !strings.Contains(err.Error(), "delayq migrate") {
		t.Fatalf("missing schema: %v", err)
	}
	from, to, err := pgstore.Migrate(ctx, pgstore.Options{URL: srv.URL(), Schema: schema})
	if err != nil || from != 0 || to != pgstore.SchemaVersion() {
		t.Fatalf("Migrate: %d -> %d, %v", from, to, err)
	}
	if err := open(); err != nil {
		t.Fatalf("migrated schema: %v", err)
	}
	adm := adminPool(t, srv)
	if _, err := adm.Exec(ctx, "INSERT INTO "+schema+".delayq_schema_version (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	// A rollback: refused with both versions named, nothing written.
	snapshot := func() string {
		var s string
		if err := adm.QueryRow(ctx, `SELECT string_agg(v, ';' ORDER BY v) FROM (
			SELECT 'v' || version || ':' || name AS v FROM `+schema+`.delayq_schema_version
			UNION ALL SELECT 't:' || table_name || ':' || column_name FROM information_schema.columns WHERE table_schema = $1) x`, schema).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()
	newer := fmt.Sprintf("at version 999, newer than this build's %d", pgstore.SchemaVersion())
	if err := open(); !errors.Is(err, store.ErrNewerFormat) || !strings.Contains(err.Error(), newer) {
		t.Fatalf("newer schema, NoMigrate: %v; want store.ErrNewerFormat saying %q", err, newer)
	}
	if _, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema}); !errors.Is(err, store.ErrNewerFormat) || !strings.Contains(err.Error(), newer) {
		t.Fatalf("newer schema, migrating: %v", err)
	}
	if after := snapshot(); after != before {
		t.Errorf("the refused Open changed the schema:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := adm.Exec(ctx, "DELETE FROM "+schema+".delayq_schema_version"); err != nil {
		t.Fatal(err)
	}
	if err := open(); err == nil || !strings.Contains(err.Error(), "delayq migrate") {
		t.Fatalf("older schema: %v", err)
	}
}

// TestLongAppTransaction: an application transaction that sent to a topic
// and stays open (holding its counter row and message rows) blocks no
// other send, lease or ack of the topic; counts are right after it
// commits, and the counter rows it caused are folded by DedupPurge.
func TestLongAppTransaction(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	send(t, s, "t", "first", 0) // the topic exists
	conn := appConn(t, srv.URL())
	tx := mustBegin(t, conn)
	if _, err := pgstore.SendTx(ctx, tx, s.Schema(), "t", pgstore.TxMessage{ID: "in-tx"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := range 20 {
			res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t",
				Messages: []store.InsertMessage{{ID: "m" + string(rune('a'+i)), Relative: true, MaxAttempts: 3}}})
			if err != nil {
				done <- err
				return
			}
			_ = res
		}
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 5, LeaseFor: 60_000, Token: "k"})
		if err == nil {
			for _, r := range recs {
				if err = s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: r.ID, Receipt: r.Receipt}); err != nil {
					break
				}
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sends, leases and acks wait for the open application transaction")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tr, err := s.TopicGet(ctx, "t")
	if err != nil || tr.Counts != (store.Counts{Ready: 17, Acked: 5}) {
		t.Fatalf("counts after commit: %+v %v", tr, err)
	}
	var rows int
	q := "SELECT count(*) FROM " + s.Schema() + ".topic_count WHERE topic = 't'"
	if err := adminPool(t, srv).QueryRow(ctx, q).Scan(&rows); err != nil || rows < 2 {
		t.Fatalf("counter rows: %d %v; want a second one, made while the transaction held the first", rows, err)
	}
	if _, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Window: 3_600_000, Max: 10}); err != nil {
		t.Fatal(err)
	}
	if err := adminPool(t, srv).QueryRow(ctx, q).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("counter rows after DedupPurge: %d %v, want 1", rows, err)
	}
	if tr2, err := s.TopicGet(ctx, "t"); err != nil || tr2.Counts != tr.Counts {
		t.Fatalf("counts after folding: %+v %v, want %+v", tr2, err, tr.Counts)
	}
}

// TestPoolIsolation: a pool passed in whose sessions default to another
// isolation level is refused; one in read committed is used and not
// closed by the store.
func TestPoolIsolation(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, c := range []struct {
		iso string
		ok  bool
	}{{"serializable", false}, {"read committed", true}} {
		cfg, err := pgxpool.ParseConfig(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = c.iso
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.Open(ctx, pgstore.Options{Pool: pool, Schema: srv.NewSchema()})
		if (err == nil) != c.ok {
			t.Errorf("Open on a %s pool: %v", c.iso, err)
		}
		if err == nil {
			_ = s.Close()
			if err := pool.Ping(ctx); err != nil {
				t.Errorf("the store closed the pool it was given: %v", err)
			}
		}
		pool.Close()
	}
}
