package mysqlstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// TestConnTxLeavesNoTransaction: a transaction that fails — fn's error
// after queued or sent writes, a queued write that fails at the COMMIT,
// the call's time running out mid-statement, a panic — leaves none of its writes
// and no open transaction on the connection it hands back to the pool
// (one connection here, so the next transaction would run inside a
// leftover one), with and without several statements per query.
func TestConnTxLeavesNoTransaction(t *testing.T) {
	srv := mysqltest.Shared(t)
	for i, url := range []string{srv.URL(), srv.URL() + "?multiStatements=false", srv.URL(), srv.URL() + "?multiStatements=false"} {
		s, err := Open(context.Background(), Options{URL: url, Prefix: srv.NewPrefix(), TimeSource: TimeCaller})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		s.db.SetMaxOpenConns(1)
		// As on a server where the sessions' level could not be set: each
		// transaction sets it.
		s.sessionRC = i < 2
		ins := "INSERT INTO " + s.t("rate_bucket") + " (topic, tokens, ts) VALUES (?, 1, 1)"
		boom := errors.New("boom")
		check := func(what string, err error, want func(error) bool) {
			t.Helper()
			if !want(err) {
				t.Errorf("multi %v, session RC %v, %s: unexpected error %v", s.multi, s.sessionRC, what, err)
			}
			var rows, open int
			if err := s.db.QueryRow("SELECT (SELECT COUNT(*) FROM "+s.t("rate_bucket")+"), @@in_transaction").Scan(&rows, &open); err != nil {
				t.Fatal(err)
			}
			if rows != 0 || open != 0 {
				t.Errorf("multi %v, session RC %v, %s: %d rows left, in a transaction: %d; want 0, 0", s.multi, s.sessionRC, what, rows, open)
			}
		}
		ctx := context.Background()
		check("queued write, then an error", s.txnRun(ctx, 1, false, func(tx *conntx, _ int64) error {
			_, _ = s.writes(tx).ExecContext(ctx, ins, "a")
			return boom
		}), is(boom))
		check("sent write, then an error", s.txnRun(ctx, 1, false, func(tx *conntx, _ int64) error {
			if _, err := tx.ExecContext(ctx, ins, "a"); err != nil {
				return err
			}
			return boom
		}), is(boom))
		check("a queued write failing at the commit", s.txnRun(ctx, 1, false, func(tx *conntx, _ int64) error {
			w := s.writes(tx)
			if _, err := w.ExecContext(ctx, ins, "a"); err != nil {
				return err
			}
			_, err := w.ExecContext(ctx, ins, "a") // without several statements per query, it fails here
			return err
		}), isDup)
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		check("the time running out mid-statement", s.txnRun(short, 1, false, func(tx *conntx, _ int64) error {
			if _, err := tx.ExecContext(short, ins, "a"); err != nil {
				return err
			}
			_, err := tx.ExecContext(short, "DO SLEEP(2)")
			return err
		}), is(context.DeadlineExceeded))
		cancel()
		func() {
			defer func() { _ = recover() }()
			_ = s.txnRun(ctx, 1, false, func(tx *conntx, _ int64) error {
				if _, err := tx.ExecContext(ctx, ins, "a"); err != nil {
					return err
				}
				panic("a bug in the transaction's function")
			})
		}()
		check("a panic after a sent write", nil, func(err error) bool { return err == nil })
		// And one that succeeds with only queued writes commits them.
		if err := s.txnRun(ctx, 1, false, func(tx *conntx, _ int64) error {
			_, err := s.writes(tx).ExecContext(ctx, ins, "kept")
			return err
		}); err != nil {
			t.Errorf("multi %v, a queued write committed: %v", s.multi, err)
		}
		var kept, open int
		if err := s.db.QueryRow("SELECT (SELECT COUNT(*) FROM "+s.t("rate_bucket")+" WHERE topic = 'kept'), @@in_transaction").Scan(&kept, &open); err != nil {
			t.Fatal(err)
		}
		if kept != 1 || open != 0 {
			t.Errorf("multi %v, a queued write committed: %d rows, in a transaction: %d; want 1, 0", s.multi, kept, open)
		}
	}
}

func is(want error) func(error) bool { return func(err error) bool { return errors.Is(err, want) } }
