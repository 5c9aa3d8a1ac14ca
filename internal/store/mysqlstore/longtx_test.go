package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// An application transaction that sent to a topic and is still open (it
// goes on with its own work before it commits) holds none of the locks
// the topic's other sends, leases and acks take: they all complete while
// it is open, through the server and through the procedure. Before count
// stripes (schema 5) each of them waited for that transaction's commit.
// Both at READ COMMITTED and at REPEATABLE READ (MariaDB's default), where
// the schema-4 procedure's duplicate checks also took next-key locks that
// held other transactions' inserts (acks' tombstones of any topic) to the
// commit.
func TestOpenApplicationTxBlocksNothing(t *testing.T) {
	for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
		for name, send := range map[string]func(context.Context, *sql.Tx, string, string, ...mysqlstore.TxMessage) ([]mysqlstore.TxResult, error){
			"send": mysqlstore.SendTx, "send_many": mysqlstore.SendManyTx,
		} {
			t.Run(iso.String()+"/"+name, func(t *testing.T) { openApplicationTxBlocksNothing(t, iso, send) })
		}
	}
}

func openApplicationTxBlocksNothing(t *testing.T, iso sql.IsolationLevel, send func(context.Context, *sql.Tx, string, string, ...mysqlstore.TxMessage) ([]mysqlstore.TxResult, error)) {
	s, db, prefix := storeAndApp(t)
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "orders", Now: 1, Messages: []store.InsertMessage{
		{ID: "ready-1", Payload: []byte("a"), MaxAttempts: 3},
		{ID: "ready-2", Payload: []byte("b"), MaxAttempts: 3},
	}}); err != nil {
		t.Fatal(err)
	}

	// The application's transaction: a send (a delay, and one due now),
	// then it stays open.
	app, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Rollback() //nolint:errcheck // committed below; a failed test rolls back
	if _, err := send(ctx, app, prefix, "orders",
		mysqlstore.TxMessage{ID: "app-later", Delay: time.Hour},
		mysqlstore.TxMessage{ID: "app-now"}); err != nil {
		t.Fatal(err)
	}

	// Everything else on the topic, each bounded well below InnoDB's lock
	// wait (50 s): a wait for the open transaction fails the step.
	step := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := f(c); err != nil {
			t.Fatalf("%s while an application transaction that sent to the topic is open: %v", what, err)
		}
	}
	step("server send", func(c context.Context) error {
		_, err := s.MessageInsertMany(c, &store.MessageInsertManyParams{Topic: "orders", Now: 1, Messages: []store.InsertMessage{{ID: "server-1", Payload: []byte("c"), MaxAttempts: 3}}})
		return err
	})
	var leased []*store.Record
	step("lease", func(c context.Context) error {
		var err error
		leased, err = s.MessageLease(c, &store.MessageLeaseParams{Topic: "orders", Now: 2, Max: 10, LeaseFor: 60_000, Token: "tok"})
		if err == nil && len(leased) != 3 {
			err = fmt.Errorf("leased %d messages, want the 3 committed ready ones", len(leased))
		}
		return err
	})
	step("ack", func(c context.Context) error {
		items := make([]store.AckItem, len(leased))
		for i, r := range leased {
			items[i] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
		}
		errs, err := s.MessageAckMany(c, &store.MessageAckManyParams{Topic: "orders", Items: items, Now: 3})
		for _, e := range errs {
			if err == nil {
				err = e
			}
		}
		return err
	})
	step("another application's send", func(c context.Context) error {
		tx, err := db.BeginTx(c, nil)
		if err != nil {
			return err
		}
		if _, err := mysqlstore.SendTx(c, tx, prefix, "orders", mysqlstore.TxMessage{ID: "app2-later", Delay: time.Hour}); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	step("topic read", func(c context.Context) error {
		_, err := s.TopicGet(c, "orders")
		return err
	})

	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	tr, err := s.TopicGet(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Counts, (store.Counts{Scheduled: 2, Ready: 1, Acked: 3}); got != want {
		t.Fatalf("counts after the commit %+v, want %+v", got, want)
	}
}

// Many application transactions sending to one topic at once make count
// stripes as they need them, up to 64: afterwards as many open ones as
// there are stripes each hold one, and none waits for another. With 8
// stripes (schema 5) the ninth waited for a commit, which held concurrent
// sends to 8 at a time per topic; and new stripes were numbered lowest
// first, so transactions that found none free all waited for the one the
// first of them was making.
func TestManyOpenApplicationTxs(t *testing.T) {
	s, db, prefix := storeAndApp(t)
	send := func(c context.Context, tx *sql.Tx, id string) error {
		_, err := mysqlstore.SendTx(c, tx, prefix, "orders", mysqlstore.TxMessage{ID: id})
		return err
	}
	// Concurrent transactions that each hold their stripe a while.
	const workers, rounds, open = 24, 6, 16
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
				if err == nil {
					if err = send(ctx, tx, fmt.Sprintf("w%d-%d", w, r)); err == nil {
						time.Sleep(30 * time.Millisecond)
						err = tx.Commit()
					} else {
						_ = tx.Rollback()
					}
				}
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var stripes int
	if err := db.QueryRow("SELECT COUNT(*) FROM `" + prefix + "topic_count` WHERE topic = 'orders'").Scan(&stripes); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d concurrent transactions made %d stripes", workers, stripes)
	if stripes < open {
		t.Fatalf("%d concurrent transactions made %d stripes, want at least %d", workers, stripes, open)
	}
	var txs []*sql.Tx
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback()
		}
	}()
	for i := range open {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
		// Bounded well below InnoDB's lock wait (50 s): a wait for one of
		// the open transactions fails the test.
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = send(c, tx, fmt.Sprintf("m%d", i))
		cancel()
		if err != nil {
			t.Fatalf("send %d while %d application transactions that sent to the topic are open: %v", i, i, err)
		}
	}
	for _, tx := range txs {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	txs = nil
	tr, err := s.TopicGet(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(workers*rounds + open); tr.Counts.Ready != want {
		t.Fatalf("counts %+v, want %d ready", tr.Counts, want)
	}
}
