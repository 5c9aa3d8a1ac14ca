package pgstore_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestRelaxedCommitOnlyWhereACrashMayUndo: leases, promotions, extends
// and lease expiries commit without waiting for the WAL flush
// (synchronous_commit off), sends and acks with the database's setting;
// and the setting does not outlive the transaction on the pooled
// connection. Statement triggers on the queue tables log the setting each
// write ran with, so every step is judged by what its transaction did.
func TestRelaxedCommitOnlyWhereACrashMayUndo(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.NewSchema()
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // every call on one connection: a leaked setting would show
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := openAt(t, srv, func(o *pgstore.Options) {
		o.Schema, o.Pool, o.TimeSource = schema, pool, pgstore.TimeCaller
	})

	q := pgx.Identifier{schema}.Sanitize()
	setup := fmt.Sprintf(`CREATE TABLE %[1]s.commit_log (tbl text, setting text);
		CREATE FUNCTION %[1]s.log_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO %[1]s.commit_log VALUES (TG_TABLE_NAME, current_setting('synchronous_commit'));
			RETURN NULL;
		END $$;`, q)
	for _, tbl := range []string{"message", "q_scheduled", "q_ready", "q_inflight", "tombstone"} {
		setup += fmt.Sprintf(`CREATE TRIGGER log_commit AFTER INSERT OR UPDATE OR DELETE ON %[1]s.%[2]s
			FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.log_commit();`, q, pgx.Identifier{tbl}.Sanitize())
	}
	if _, err := pool.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	var dflt string
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&dflt); err != nil {
		t.Fatal(err)
	}
	if dflt == "off" {
		t.Fatalf("the test database runs with synchronous_commit off: nothing to tell apart")
	}

	// step runs op and checks the settings its writes ran with.
	step := func(name, want string, op func() error) {
		t.Helper()
		if _, err := pool.Exec(ctx, "TRUNCATE "+q+".commit_log"); err != nil {
			t.Fatal(err)
		}
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rows, err := pool.Query(ctx, "SELECT DISTINCT setting FROM "+q+".commit_log")
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{want}) {
			t.Errorf("%s wrote with synchronous_commit %q, want only %q (none means it wrote nothing)", name, got, want)
		}
		var now string
		if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&now); err != nil {
			t.Fatal(err)
		}
		if now != dflt {
			t.Errorf("after %s the pooled connection has synchronous_commit %q, want the database's %q", name, now, dflt)
		}
	}

	var recs []*store.Record
	lease := func(now int64) func() error {
		return func() error {
			var err error
			recs, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: now, Max: 10, LeaseFor: 1000, Token: fmt.Sprint("k", now)})
			if err == nil && len(recs) != 1 {
				err = fmt.Errorf("leased %d, want 1", len(recs))
			}
			return err
		}
	}
	step("send", dflt, func() error {
		_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: 0, Messages: []store.InsertMessage{
			{ID: "a", DueAt: 1000, MaxAttempts: 3, Payload: []byte("x")},
			{ID: "b", DueAt: 5000, MaxAttempts: 3},
		}})
		return err
	})
	step("promote", "off", func() error {
		res, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: 2000, Max: 10})
		if err == nil && res.Promoted != 1 {
			err = fmt.Errorf("promoted %d, want 1", res.Promoted)
		}
		return err
	})
	step("lease", "off", lease(2000))
	step("extend", "off", func() error {
		_, err := s.MessageExtend(ctx, &store.MessageExtendParams{Topic: "t", ID: "a", Receipt: recs[0].Receipt, Now: 2100, LeaseFor: 1000})
		return err
	})
	step("expire", "off", func() error {
		got, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 4000, Max: 10})
		if err == nil && len(got) != 1 {
			err = fmt.Errorf("expired %d, want 1", len(got))
		}
		return err
	})
	step("lease again", "off", lease(4000))
	step("ack", dflt, func() error {
		return s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "a", Receipt: recs[0].Receipt, Now: 4100})
	})
	step("lease due", "off", func() error {
		got, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "t", Now: 6000, Max: 10, LeaseFor: 1000, Token: "due"})
		if err == nil && len(got) != 1 {
			err = fmt.Errorf("leased %d due, want 1", len(got))
		}
		recs = got
		return err
	})
	step("nack", dflt, func() error {
		_, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "t", ID: "b", Receipt: recs[0].Receipt, Now: 6100, RetryDelay: 3000})
		return err
	})
}
