package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// An id that no message holds when a send looks it up can be sent by
// another producer, leased and acked before the send inserts it: no row
// was there to lock. The send must still answer the ack's tombstone as a
// duplicate and leave no live message (storetest's ConcurrentLease sent
// such an id again about once in 40 runs before the server read the
// tombstones after its insert). Forced here between the lookup and the
// insert, for an id in a batch and for one sent alone.
func TestInsertAckedBetweenLookupAndInsert(t *testing.T) {
	s := open(t, mysqlstore.TimeCaller)
	for _, batch := range [][]string{{"a", "x", "z"}, {"x"}} {
		topic := "t-" + batch[len(batch)-1]
		var raced atomic.Bool
		mysqlstore.SetAfterLookup(s, func() {
			if raced.Swap(true) {
				return // the other producer's own send
			}
			insert(t, s, topic, "x")
			leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: insNow, Max: 1, LeaseFor: 60_000, Token: "other"})
			if err != nil || len(leased) != 1 {
				t.Errorf("the other consumer's lease: %v %v", leased, err)
				return
			}
			if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: "x", Receipt: leased[0].Receipt, Now: insNow}); err != nil {
				t.Errorf("the other consumer's ack: %v", err)
			}
		})
		got := insert(t, s, topic, batch...)
		mysqlstore.SetAfterLookup(s, nil)
		if !raced.Load() {
			t.Fatal("the hook did not run")
		}
		for i, id := range batch {
			wantDup := id == "x"
			if got[i].Duplicate != wantDup || got[i].Record == nil || (wantDup && got[i].Record.State != store.StateAcked) {
				t.Errorf("%v: result %d (%s): %+v, want duplicate %v (x: of the acked message)", batch, i, id, got[i], wantDup)
			}
		}
		if r, err := s.MessageGet(ctx, topic, "x"); err != nil || r.State != store.StateAcked {
			t.Errorf("%v: x after the race: %+v %v; want the tombstone", batch, r, err)
		}
		leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: insNow, Max: 10, LeaseFor: 60_000, Token: "tok"})
		fresh := len(batch) - 1 // all but x
		if err != nil || len(leased) != fresh {
			t.Errorf("%v: leased %d messages (%v), want the batch's %d new ones", batch, len(leased), err, fresh)
		}
		tr, err := s.TopicGet(ctx, topic)
		if err != nil || tr.Counts.Inflight != int64(fresh) || tr.Counts.Acked != 1 || tr.Counts.Ready != 0 {
			t.Errorf("%v: counts %+v %v, want %d inflight, 1 acked", batch, tr.Counts, err, fresh)
		}
	}
}

// A procedure's send of an id whose message an uncommitted ack is moving
// to its tombstone waits for the ack (its insert needs the message row's
// key), then must find the tombstone: at READ COMMITTED the send answers
// a duplicate and leaves no live message. With the tombstone read before
// the insert (schema 10) the insert went ahead once the ack committed,
// now and then.
func TestSendRacesAck(t *testing.T) {
	s, db, prefix := storeAndApp(t)
	for round := range 5 {
		for name, send := range map[string]func(context.Context, *sql.Tx, string, string, ...mysqlstore.TxMessage) ([]mysqlstore.TxResult, error){
			"send": mysqlstore.SendTx, "send_many": mysqlstore.SendManyTx,
		} {
			topic := fmt.Sprintf("t-%s-%d", name, round)
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Messages: []store.InsertMessage{
				{ID: "x", Payload: []byte("x"), Relative: true, MaxAttempts: 3},
			}}); err != nil {
				t.Fatal(err)
			}
			leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Max: 1, LeaseFor: 60_000, Token: "tok"})
			if err != nil || len(leased) != 1 {
				t.Fatalf("lease: %v %v", leased, err)
			}
			ackTx := holdAck(t, db, prefix, leased[0])
			type answer struct {
				dup bool
				err error
			}
			done := make(chan answer, 1)
			go func() {
				var a answer
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
				if err != nil {
					done <- answer{err: err}
					return
				}
				res, err := send(ctx, tx, prefix, topic, mysqlstore.TxMessage{ID: "x", Payload: []byte("again"), Delay: time.Second})
				if err == nil {
					a.dup = res[0].Duplicate
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
				a.err = err
				done <- a
			}()
			select {
			case a := <-done:
				t.Fatalf("%s: the send answered (duplicate %v, %v) without waiting for the ack", name, a.dup, a.err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := ackTx.Commit(); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil || !a.dup {
				t.Errorf("%s, round %d: the send racing the ack answered duplicate %v, %v; want a duplicate", name, round, a.dup, a.err)
			}
			if r, err := s.MessageGet(ctx, topic, "x"); err != nil || r.State != store.StateAcked {
				t.Errorf("%s, round %d: x after the race: %+v %v; want the tombstone", name, round, r, err)
			}
		}
	}
}

// holdAck acks r as the store does (its message and q_inflight rows
// deleted, its tombstone inserted) in a transaction it leaves open.
func holdAck(t *testing.T, db *sql.DB, prefix string, r *store.Record) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	p := "`" + prefix
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"SELECT seq FROM " + p + "message` WHERE topic = ? AND id = ? FOR UPDATE", []any{r.Topic, r.ID}},
		{"DELETE FROM " + p + "q_inflight` WHERE lease_until = ? AND seq = ?", []any{r.LeaseUntil, r.Seq}},
		{"DELETE FROM " + p + "message` WHERE topic = ? AND id = ?", []any{r.Topic, r.ID}},
		{"INSERT INTO " + p + "tombstone` (topic, id, seq, acked_at, due, created, deliveries, failures, max_attempts, last_error, priority, receipt) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, NULL, 0, ?)",
			[]any{r.Topic, r.ID, r.Seq, time.Now().UnixMilli(), r.DueAt, r.CreatedAt, r.Deliveries, r.MaxAttempts, r.Receipt}},
	} {
		if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil { // #nosec G202 -- the test's prefix
			t.Fatal(err)
		}
	}
	return tx
}
