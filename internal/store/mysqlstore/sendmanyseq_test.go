package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// send_many numbers a batch's queue rows from LAST_INSERT_ID() when the
// message insert took consecutive values, and reads the seqs back when it
// did not; either way every queue row carries its message's seq, so that
// every message sent can be leased. Tried here on each path: a plain
// batch, a session with auto_increment_increment 3, a batch with a
// repeated id and one with an id already a message (read back, or sent
// one at a time).
func TestSendManySeqs(t *testing.T) {
	s, db, prefix := storeAndApp(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(msgs ...mysqlstore.TxMessage) {
		t.Helper()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mysqlstore.SendManyTx(ctx, tx, prefix, "seqs", msgs...); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	due := 0 // of the messages sent (not duplicates): those due now
	batch := func(tag string, n int) []mysqlstore.TxMessage {
		var out []mysqlstore.TxMessage
		for i := range n {
			// Every fourth one an hour ahead: both queue tables get rows.
			m := mysqlstore.TxMessage{ID: fmt.Sprintf("%s-%d", tag, i), Payload: []byte(tag)}
			if i%4 == 3 {
				m.Delay = time.Hour
			} else {
				due++
			}
			out = append(out, m)
		}
		return out
	}
	send(batch("plain", 40)...)
	if _, err := conn.ExecContext(ctx, "SET SESSION auto_increment_increment = 3"); err != nil {
		t.Fatal(err)
	}
	send(batch("step3", 40)...)
	if _, err := conn.ExecContext(ctx, "SET SESSION auto_increment_increment = 1"); err != nil {
		t.Fatal(err)
	}
	send(append(batch("repeat", 20), mysqlstore.TxMessage{ID: "repeat-3"})...) // read back
	send(append(batch("again", 20), mysqlstore.TxMessage{ID: "plain-0"})...)   // one at a time
	send(make([]mysqlstore.TxMessage, 30)...)                                  // ids of the database's
	due += 30

	checkQueueSeqs(t, db, prefix, "seqs", 40+40+20+20+30)
	leaseAll(t, s, "seqs", due)
}

// checkQueueSeqs fails unless topic has want messages and each has one
// queue row, with its seq.
func checkQueueSeqs(t *testing.T, db *sql.DB, prefix, topic string, want int) {
	t.Helper()
	var msgs, matched, queued int
	q := "SELECT (SELECT COUNT(*) FROM `" + prefix + "message` WHERE topic = ?), " + // #nosec G202 -- the test's prefix
		"(SELECT COUNT(*) FROM `" + prefix + "q_ready` q JOIN `" + prefix + "message` m ON m.topic = q.topic AND m.id = q.id AND m.seq = q.seq WHERE q.topic = ?) + " +
		"(SELECT COUNT(*) FROM `" + prefix + "q_scheduled` q JOIN `" + prefix + "message` m ON m.topic = q.topic AND m.id = q.id AND m.seq = q.seq WHERE q.topic = ?), " +
		"(SELECT COUNT(*) FROM `" + prefix + "q_ready` WHERE topic = ?) + (SELECT COUNT(*) FROM `" + prefix + "q_scheduled` WHERE topic = ?)"
	if err := db.QueryRowContext(ctx, q, topic, topic, topic, topic, topic).Scan(&msgs, &matched, &queued); err != nil {
		t.Fatal(err)
	}
	if msgs != want || matched != want || queued != want {
		t.Fatalf("%d messages, %d queue rows, %d of them with their message's seq; want %d of each", msgs, queued, matched, want)
	}
}

// leaseAll leases topic's due messages until none is left and fails unless
// that is want of them.
func leaseAll(t *testing.T, s *mysqlstore.Store, topic string, want int) {
	t.Helper()
	got := 0
	for {
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Max: 100, LeaseFor: 60_000, Token: "seqs"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		got += len(recs)
	}
	if got != want {
		t.Fatalf("leased %d due messages, want %d", got, want)
	}
}

// With innodb_autoinc_lock_mode 2 (interleaved: Galera's, and a choice of
// the operator's) concurrent multi-row inserts may take interleaved
// values; send_many must then find out and read the seqs back. Eight
// applications send batches at once, one server sends single messages
// beside them.
func TestSendManySeqsInterleaved(t *testing.T) {
	srv := mysqltest.Start(t, "--innodb-autoinc-lock-mode=2")
	prefix := srv.NewPrefix()
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, Timeout: suiteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode int
	if err := db.QueryRowContext(ctx, "SELECT @@innodb_autoinc_lock_mode").Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("innodb_autoinc_lock_mode = %d, %v; want 2", mode, err)
	}
	const apps, batches, size, singles = 8, 15, 40, 200
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, apps+1)
	for a := range apps {
		wg.Go(func() {
			for b := range batches {
				msgs := make([]mysqlstore.TxMessage, size)
				for i := range msgs {
					msgs[i].ID = fmt.Sprintf("app%d-%d-%d", a, b, i)
				}
				if err := sendManyCommit(cctx, db, prefix, msgs); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range singles {
			if _, err := s.MessageInsertMany(cctx, &store.MessageInsertManyParams{Topic: "seqs", Messages: []store.InsertMessage{{ID: fmt.Sprintf("single-%d", i), Relative: true}}}); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkQueueSeqs(t, db, prefix, "seqs", apps*batches*size+singles)
	leaseAll(t, s, "seqs", apps*batches*size+singles)
}

func sendManyCommit(ctx context.Context, db *sql.DB, prefix string, msgs []mysqlstore.TxMessage) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := mysqlstore.SendManyTx(ctx, tx, prefix, "seqs", msgs...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// send_many answers every id as sent, whatever it holds: the answer is
// built in memory for ids of up to 85 bytes (each quoted id typed 512
// characters) and on disk beyond; both are tried with ids that JSON
// escapes most (a control character becomes six), at the bound and past
// it (each the longest of its batch), and with quotes, backslashes and
// multi-byte characters.
func TestSendManyAnswersEveryID(t *testing.T) {
	s, db, prefix := storeAndApp(t)
	for _, ids := range [][]string{
		{strings.Repeat("\x01", 85), `quote " and \ back`, "ünïcode ✓", "plain"},
		{strings.Repeat("\x1f", 86), "short"},
		{strings.Repeat(`"`, 255), strings.Repeat("é", 127), strings.Repeat("\x02", 255)},
	} {
		msgs := make([]mysqlstore.TxMessage, len(ids))
		for i, id := range ids {
			msgs[i] = mysqlstore.TxMessage{ID: id, Payload: []byte(id)}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := mysqlstore.SendManyTx(ctx, tx, prefix, "ids", msgs...)
		if err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			if res[i].ID != id || res[i].Duplicate {
				t.Errorf("result %d: %+q duplicate %v, want %+q sent", i, res[i].ID, res[i].Duplicate, id)
			}
			if r, err := s.MessageGet(ctx, "ids", id); err != nil || string(r.Payload) != id {
				t.Errorf("MessageGet(%+.20q): %v", id, err)
			}
		}
	}
}
