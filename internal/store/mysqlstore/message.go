package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/sqlcodec"
)

const msgCols = "topic, id, seq, state, payload, headers, due, created, updated, deliveries, failures, max_attempts, last_error, receipt, lease_until, dead_at, priority"

// msgColsNoBody are msgCols but the payload and headers: what an ack
// reads (a tombstone keeps neither), so that a batch of acks does not
// carry its messages' payloads from the database only to drop them.
const msgColsNoBody = "topic, id, seq, state, due, created, updated, deliveries, failures, max_attempts, last_error, receipt, lease_until, dead_at, priority"

type scanner interface{ Scan(dest ...any) error }

func scanMsg(sc scanner) (*store.Record, error) { return scanMsgOf(sc, true) }

// scanMsgOf scans a row of msgCols, or of msgColsNoBody without body (the
// record then has an empty payload and no headers).
func scanMsgOf(sc scanner, body bool) (*store.Record, error) {
	r := &store.Record{}
	var state uint8 // a value out of range fails the scan
	var headers []byte
	var lastErr, receipt sql.NullString
	var topic, id []byte
	dest := make([]any, 0, 17)
	dest = append(dest, &topic, &id, &r.Seq, &state)
	if body {
		dest = append(dest, &r.Payload, &headers)
	}
	dest = append(dest, &r.DueAt, &r.CreatedAt, &r.UpdatedAt, &r.Deliveries, &r.Failures, &r.MaxAttempts, &lastErr, &receipt, &r.LeaseUntil, &r.DeadAt, &r.Priority)
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	r.Topic, r.ID, r.State, r.LastError, r.Receipt = string(topic), string(id), store.State(state), lastErr.String, receipt.String
	var err error
	if r.Headers, err = sqlcodec.DecodeHeaders(headers); err != nil {
		return nil, err
	}
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	return r, nil
}

func (s *Store) getMsg(ctx context.Context, tx *conntx, topic, id string, lock bool) (*store.Record, error) {
	q := "SELECT " + msgCols + " FROM " + s.t("message") + " WHERE topic = ? AND id = ?"
	if lock {
		q += " FOR UPDATE"
	}
	r, err := scanMsg(tx.QueryRowContext(ctx, q, topic, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// tombCols are a tombstone's columns; receipt (schema 9) is the one that
// acked it, NULL in a tombstone made before (read as none).
const tombCols = "topic, id, seq, acked_at, headers, due, created, deliveries, failures, max_attempts, last_error, priority, receipt"

func (s *Store) getTomb(ctx context.Context, q querier, topic, id string) (*store.Record, error) {
	r, err := scanTomb(q.QueryRowContext(ctx, "SELECT "+tombCols+" FROM "+s.t("tombstone")+" WHERE topic = ? AND id = ?", topic, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

func scanTomb(sc scanner) (*store.Record, error) {
	r := &store.Record{State: store.StateAcked}
	var t, i, headers []byte
	var lastErr, receipt sql.NullString
	if err := sc.Scan(&t, &i, &r.Seq, &r.AckedAt, &headers, &r.DueAt, &r.CreatedAt, &r.Deliveries, &r.Failures, &r.MaxAttempts, &lastErr, &r.Priority, &receipt); err != nil {
		return nil, err
	}
	r.Topic, r.ID, r.LastError, r.Receipt, r.UpdatedAt = string(t), string(i), lastErr.String, receipt.String, r.AckedAt
	return r, nil
}

// counts accumulates per-topic count changes of one transaction.
type counts map[string]*[6]int64 // scheduled, ready, inflight, dead, acked, ver

func (c counts) add(topic string, st store.State, d int64) {
	a := c[topic]
	if a == nil {
		a = new([6]int64)
		c[topic] = a
	}
	if st >= store.StateScheduled && st <= store.StateAcked {
		idx := map[store.State]int{store.StateScheduled: 0, store.StateReady: 1, store.StateInflight: 2, store.StateDead: 3, store.StateAcked: 4}[st]
		a[idx] += d
	}
	if d > 0 && (st == store.StateScheduled || st == store.StateReady) {
		a[5]++ // wakes the pollers (see notify.go)
	}
}

// countStripes bounds the topic_count rows of each topic (migration 6;
// 8 in migration 5): as many transactions of a topic as there are stripes
// count at once, each holding its stripe to its commit.
const countStripes = 64

// flushCounts adds the transaction's count changes to one stripe of each
// topic's counts: the stripe the store gave the transaction (ownStripe),
// by one upsert, so that no two of this store's transactions wait for
// each other on it. An upsert takes the row's exclusive lock at once
// (INSERT IGNORE would take a shared one first, and two such upgrading to
// exclusive deadlock). With the store's stripes all held, it takes the
// first stripe no other transaction holds (SKIP LOCKED), or upserts a new
// one (newStripe).
func (s *Store) flushCounts(ctx context.Context, tx *conntx, c counts) error {
	return s.flushCountsOf(ctx, tx, tx, c, false)
}

// flushCountsOf is flushCounts; sent says the transaction inserted
// messages (a send), which may make a deleted topic again. Every other
// change moves a live message, and a topic with live messages is never
// deleted (TopicDelete), so its row is looked up only when this server
// has not seen it yet: a promote once read it every time, one more
// round trip per message in a paced flow.
//
// Its statements go through q: tx, or a writeBatch of tx that sends the
// count row with the transaction's other writes and its reads after them.
func (s *Store) flushCountsOf(ctx context.Context, tx *conntx, q querier, c counts, sent bool) error {
	own, haveOwn := s.ownStripe(tx)
	// Topics in order: two transactions holding the same stripe number
	// (two servers) lock their rows in one order.
	for _, topic := range slices.Sorted(maps.Keys(c)) {
		a := c[topic]
		if haveOwn {
			if _, err := q.ExecContext(ctx, "INSERT INTO "+s.t("topic_count")+" (topic, stripe, scheduled, ready, inflight, dead, acked, ver) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "+ // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
				"ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), inflight = inflight + VALUES(inflight), "+
				"dead = dead + VALUES(dead), acked = acked + VALUES(acked), ver = ver + VALUES(ver)",
				topic, own, a[0], a[1], a[2], a[3], a[4], a[5]); err != nil {
				return err
			}
			if err := s.topicRow(ctx, q, topic, sent && a[5] > 0); err != nil {
				return err
			}
			continue
		}
		var stripe int
		// A numbered stripe: the rows of the send procedure (schema 7) are
		// left to foldCounts. Read through q, which sends what it holds
		// first; tx is used once it holds nothing.
		err := q.QueryRowContext(ctx, "SELECT stripe FROM "+s.t("topic_count")+" WHERE topic = ? AND stripe < ? LIMIT 1 FOR UPDATE SKIP LOCKED", topic, countStripes).Scan(&stripe) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if stripe, err = s.newStripe(ctx, tx, topic); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t("topic_count")+" (topic, stripe, scheduled, ready, inflight, dead, acked, ver) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "+ // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
				"ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), inflight = inflight + VALUES(inflight), "+
				"dead = dead + VALUES(dead), acked = acked + VALUES(acked), ver = ver + VALUES(ver)",
				topic, stripe, a[0], a[1], a[2], a[3], a[4], a[5])
		case err == nil:
			_, err = tx.ExecContext(ctx, "UPDATE "+s.t("topic_count")+" SET scheduled = scheduled + ?, ready = ready + ?, inflight = inflight + ?, "+ // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
				"dead = dead + ?, acked = acked + ?, ver = ver + ? WHERE topic = ? AND stripe = ?",
				a[0], a[1], a[2], a[3], a[4], a[5], topic, stripe)
		}
		if err != nil {
			return err
		}
		// A message sent to a deleted topic makes it again.
		if err := s.topicRow(ctx, q, topic, sent && a[5] > 0); err != nil {
			return err
		}
	}
	return nil
}

// newStripe picks the stripe to make when none of topic's is free: one
// of the 8 numbers after the highest made (a consistent read, so it waits
// for no holder) at random, or with none left there any number at random
// (made: to wait for). Not the lowest number not made: transactions that
// find none free at once would all pick the one the first of them is
// making, and wait for its commit, so the stripes would hardly grow. Not
// in a hole either: at REPEATABLE READ (an application's transaction
// around the send procedure) a locking read of a stripe also locks the
// gap before it.
func (s *Store) newStripe(ctx context.Context, tx *conntx, topic string) (int, error) {
	var high sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT MAX(stripe) FROM "+s.t("topic_count")+" WHERE topic = ? AND stripe < ?", topic, countStripes).Scan(&high); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		return 0, err
	}
	next := 0
	if high.Valid {
		next = int(high.Int64) + 1
	}
	if next < countStripes {
		return next + rand.IntN(min(8, countStripes-next)), nil // #nosec G404 -- spreads lock contention over stripes; nothing depends on it being unpredictable
	}
	return rand.IntN(countStripes), nil // #nosec G404 -- as above
}

// Folding the send procedure's count rows (schema 7: one row per call,
// stripe >= countStripes) into the numbered stripes. A topic's rows are
// folded when a poll sees more than foldAfter of them beside the numbered
// stripes, at most foldBatch per transaction.
const (
	foldAfter = 128
	foldBatch = 4096
)

// foldCounts folds up to foldBatch of topic's procedure count rows into a
// numbered stripe in one transaction: it locks them with SKIP LOCKED (a
// row whose application transaction has not committed is invisible or
// locked, and is left for a later fold), deletes them and adds their sums,
// ver included, to a stripe, so the topic's totals never move. It
// answers how many rows it folded.
func (s *Store) foldCounts(ctx context.Context, topic string) (int, error) {
	folded := 0
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		folded = 0
		rows, err := tx.QueryContext(ctx, "SELECT stripe, scheduled, ready, inflight, dead, acked, ver FROM "+s.t("topic_count")+ // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
			" WHERE topic = ? AND stripe >= ? ORDER BY stripe LIMIT ? FOR UPDATE SKIP LOCKED", topic, countStripes, foldBatch)
		if err != nil {
			return err
		}
		sum := new([6]int64)
		var stripes []any
		for rows.Next() {
			var stripe int64
			var a [6]int64
			if err := rows.Scan(&stripe, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]); err != nil {
				_ = rows.Close()
				return err
			}
			for i := range a {
				sum[i] += a[i]
			}
			stripes = append(stripes, stripe)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil || len(stripes) == 0 {
			return err
		}
		// By point reads (keyRows): an IN list may scan the topic's rows
		// and wait for an open application transaction's.
		del := "DELETE c FROM " + keyRows(len(stripes), "stripe") + " k STRAIGHT_JOIN " + s.t("topic_count") + " c ON c.topic = ? AND c.stripe = k.stripe" // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
		if _, err := tx.ExecContext(ctx, del, append(stripes, topic)...); err != nil {
			return err
		}
		folded = len(stripes)
		return s.flushCounts(ctx, tx, counts{topic: sum})
	})
	return folded, err
}

// topicRow makes topic's row when it has none and, for a send, clears its
// deletion mark (see TopicDelete), without locking a row that needs
// neither: the checks are consistent reads. A lock on the row would be
// held to the end of the transaction, and the send procedure runs in the
// application's, possibly at REPEATABLE READ, where even an UPDATE that
// matches nothing keeps its lock. Rows are never deleted, so one seen
// committed is remembered. q is the transaction, or a writeBatch of it
// (its read then goes with the writes queued before it).
func (s *Store) topicRow(ctx context.Context, q querier, topic string, send bool) error {
	if _, ok := s.topics.Load(topic); ok && !send {
		return nil
	}
	var deleted bool
	err := q.QueryRowContext(ctx, "SELECT deleted FROM "+s.t("topic")+" WHERE name = ?", topic).Scan(&deleted) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = q.ExecContext(ctx, "INSERT IGNORE INTO "+s.t("topic")+" (name) VALUES (?)", topic) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		return err
	case err != nil:
		return err
	}
	s.topics.Store(topic, struct{}{})
	if !send || !deleted {
		return nil
	}
	_, err = q.ExecContext(ctx, "UPDATE "+s.t("topic")+" SET deleted = 0 WHERE name = ? AND deleted = 1", topic) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	return err
}

// addQ and delQ keep a record's row in its state's queue table.
func (s *Store) addQ(ctx context.Context, tx *conntx, r *store.Record) error {
	var err error
	switch r.State {
	case store.StateScheduled:
		_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t("q_scheduled")+" (topic, due, seq, id) VALUES (?, ?, ?, ?)", r.Topic, r.DueAt, r.Seq, r.ID) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	case store.StateReady:
		_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t("q_ready")+" (topic, due, seq, id, priority) VALUES (?, ?, ?, ?, ?)", r.Topic, r.DueAt, r.Seq, r.ID, r.Priority) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	case store.StateInflight:
		_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t("q_inflight")+" (lease_until, seq, topic, id) VALUES (?, ?, ?, ?)", r.LeaseUntil, r.Seq, r.Topic, r.ID) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	case store.StateDead:
		_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t("q_dead")+" (topic, dead_at, seq, id) VALUES (?, ?, ?, ?)", r.Topic, r.DeadAt, r.Seq, r.ID) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	}
	return err
}

func (s *Store) delQ(ctx context.Context, tx *conntx, r *store.Record) error {
	var err error
	switch r.State {
	case store.StateScheduled:
		_, err = tx.ExecContext(ctx, "DELETE FROM "+s.t("q_scheduled")+" WHERE topic = ? AND due = ? AND seq = ?", r.Topic, r.DueAt, r.Seq) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	case store.StateReady:
		_, err = tx.ExecContext(ctx, "DELETE FROM "+s.t("q_ready")+" WHERE topic = ? AND priority = ? AND due = ? AND seq = ?", r.Topic, r.Priority, r.DueAt, r.Seq) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	case store.StateInflight:
		_, err = tx.ExecContext(ctx, "DELETE FROM "+s.t("q_inflight")+" WHERE lease_until = ? AND seq = ?", r.LeaseUntil, r.Seq) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	case store.StateDead:
		_, err = tx.ExecContext(ctx, "DELETE FROM "+s.t("q_dead")+" WHERE topic = ? AND dead_at = ? AND seq = ?", r.Topic, r.DeadAt, r.Seq) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
	}
	return err
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// put writes r's mutable fields back to its message row.
func (s *Store) put(ctx context.Context, tx *conntx, r *store.Record) error {
	_, err := tx.ExecContext(ctx, "UPDATE "+s.t("message")+" SET state = ?, due = ?, updated = ?, deliveries = ?, failures = ?, last_error = ?, receipt = ?, lease_until = ?, dead_at = ? WHERE topic = ? AND id = ?", // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		int(r.State), r.DueAt, r.UpdatedAt, r.Deliveries, r.Failures, nullStr(r.LastError), nullStr(r.Receipt), r.LeaseUntil, r.DeadAt, r.Topic, r.ID)
	return err
}

// move changes r's state: queue row out, fields changed by f, row back.
func (s *Store) move(ctx context.Context, tx *conntx, c counts, r *store.Record, f func()) error {
	if err := s.delQ(ctx, tx, r); err != nil {
		return err
	}
	c.add(r.Topic, r.State, -1)
	f()
	c.add(r.Topic, r.State, 1)
	if err := s.put(ctx, tx, r); err != nil {
		return err
	}
	return s.addQ(ctx, tx, r)
}

func notFound(topic, id string) error {
	return fmt.Errorf("mysqlstore: message %q in topic %q: %w", id, topic, store.ErrNotFound)
}

func conflict(r *store.Record, why string) error {
	return fmt.Errorf("mysqlstore: message %q in topic %q is %s (%s): %w", r.ID, r.Topic, r.State, why, store.ErrConflict)
}

// MessageInsertMany implements store.Store (see insertMany).
func (s *Store) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	var out []store.InsertResult
	err := s.txnLazy(ctx, p.Now, s.sendReadsClock(), func(tx *conntx, now int64) error {
		var err error
		out, err = s.insertMany(ctx, tx, p, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sendReadsClock says whether a send's first statement (the lookup of
// the caller's ids, or the insert) reads the database's clock, in the
// same round trip: with several statements per query, on the database's
// clock. Otherwise the transaction reads it first, in a round trip of its
// own.
func (s *Store) sendReadsClock() bool { return s.multi && !s.callerNow }

// MessageGet implements store.Store.
func (s *Store) MessageGet(ctx context.Context, topic, id string) (*store.Record, error) {
	var r *store.Record
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		var err error
		if r, err = s.getMsg(ctx, tx, topic, id, false); err != nil || r != nil {
			return err
		}
		if r, err = s.getTomb(ctx, tx, topic, id); err != nil || r != nil {
			return err
		}
		return notFound(topic, id)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// live loads a message for update; an acked one is a conflict.
func (s *Store) live(ctx context.Context, tx *conntx, topic, id string) (*store.Record, error) {
	r, err := s.getMsg(ctx, tx, topic, id, true)
	if err != nil || r != nil {
		return r, err
	}
	t, err := s.getTomb(ctx, tx, topic, id)
	if err != nil {
		return nil, err
	}
	if t != nil {
		return nil, conflict(t, "acked")
	}
	return nil, notFound(topic, id)
}

// MessageCancel implements store.Store.
func (s *Store) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	var r *store.Record
	err := s.txn(ctx, p.Now, func(tx *conntx, _ int64) error {
		var err error
		if r, err = s.live(ctx, tx, p.Topic, p.ID); err != nil {
			return err
		}
		if r.State == store.StateDead {
			return conflict(r, "dead")
		}
		if err := s.delQ(ctx, tx, r); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.t("message")+" WHERE topic = ? AND id = ?", r.Topic, r.ID); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
			return err
		}
		c := counts{}
		c.add(r.Topic, r.State, -1)
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// MessageReschedule implements store.Store.
func (s *Store) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	var r *store.Record
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		var err error
		if r, err = s.live(ctx, tx, p.Topic, p.ID); err != nil {
			return err
		}
		if r.State != store.StateScheduled && r.State != store.StateReady {
			return conflict(r, "not waiting")
		}
		c := counts{}
		if err := s.move(ctx, tx, c, r, func() {
			r.DueAt, r.UpdatedAt = p.Due(now), now
			r.State = store.StateScheduled
			if r.DueAt <= now {
				r.State = store.StateReady
			}
		}); err != nil {
			return err
		}
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

type qkey struct {
	due  int64
	seq  uint64
	id   string
	top  string
	prio uint8 // when the query selects a fifth column, priority
}

func (s *Store) pick(ctx context.Context, tx *conntx, q string, args ...any) ([]qkey, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []qkey
	for rows.Next() {
		var k qkey
		var id, top []byte
		dest := []any{&k.due, &k.seq, &id, &top}
		if len(cols) == 5 {
			dest = append(dest, &k.prio)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		k.id, k.top = string(id), string(top)
		out = append(out, k)
	}
	return out, rows.Err()
}

// moveBudget bounds the time one MessagePromote or LeaseExpire spends
// moving messages, moveChunk at a time: a quarter of the call's time
// bound. What is left stays for the next call, which the engine makes at
// once when a call moved fewer than it asked for. Without it, a backlog
// whose moves outlast the time bound (1,000 messages that came due while
// the database was down, moved under load) failed whole on every retry
// and waited until the load dropped.
func (s *Store) moveBudget() moveBudget {
	return moveBudget{until: time.Now().Add(s.timeout / 4)}
}

type moveBudget struct{ until time.Time }

// spent reports whether the budget is over before move i; the first move
// is always made, so that every call makes progress.
func (b moveBudget) spent(i int) bool { return i > 0 && time.Now().After(b.until) }

// MessagePromote implements store.Store.
func (s *Store) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (*store.PromoteResult, error) {
	return s.promote(ctx, p, 0, false)
}

// MessagePromoteGrace implements store.DueLeaser.
func (s *Store) MessagePromoteGrace(ctx context.Context, p *store.MessagePromoteParams, grace int64) (*store.PromoteResult, error) {
	return s.promote(ctx, p, max(grace, 0), true)
}

// promote promotes the messages due by now − grace; with held, HeldDue is
// the earliest scheduled message still due by now and NextDue the
// earliest due after now, else NextDue is the earliest scheduled.
func (s *Store) promote(ctx context.Context, p *store.MessagePromoteParams, grace int64, held bool) (*store.PromoteResult, error) {
	res := &store.PromoteResult{}
	err := s.txnPick(ctx, p.Now, func(tx *conntx, now int64) error {
		*res = store.PromoteResult{}
		needClock := !s.callerNow // TimeDB: the first statement reads the clock
		if p.Max > 0 {
			var keys []qkey
			var err error
			if needClock {
				n := s.nowSQL()
				keys, now, err = s.pickNow(ctx, tx, "SELECT due, seq, id, topic, "+n+" FROM "+s.t("q_scheduled")+" WHERE topic = ? AND due <= "+n+" - ? ORDER BY due, seq LIMIT ? FOR UPDATE SKIP LOCKED", p.Topic, grace, p.Max) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and the clock's expression (nowSQL: fixed text or an integer) are concatenated; values are parameters
			} else {
				keys, err = s.pick(ctx, tx, "SELECT due, seq, id, topic FROM "+s.t("q_scheduled")+" WHERE topic = ? AND due <= ? ORDER BY due, seq LIMIT ? FOR UPDATE SKIP LOCKED", p.Topic, now-grace, p.Max)
			}
			if err != nil {
				return err
			}
			needClock = needClock && len(keys) == 0
			c := counts{}
			budget := s.moveBudget()
			for i := 0; i < len(keys); i += moveChunk {
				if budget.spent(i) {
					break // the rest stay due for the next call
				}
				n, err := s.promoteKeys(ctx, tx, c, p.Topic, keys[i:min(i+moveChunk, len(keys))], now)
				if err != nil {
					return err
				}
				res.Promoted += n
			}
			if err := s.flushCounts(ctx, tx, c); err != nil {
				return err
			}
		}
		var next sql.NullInt64
		if needClock { // nothing picked (or Max 0): the clock with the next due
			if err := tx.QueryRowContext(ctx, "SELECT "+s.nowSQL()+", (SELECT MIN(due) FROM "+s.t("q_scheduled")+" WHERE topic = ?)", p.Topic).Scan(&now, &next); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and the clock's expression (nowSQL) are concatenated; values are parameters
				return err
			}
		} else if err := tx.QueryRowContext(ctx, "SELECT MIN(due) FROM "+s.t("q_scheduled")+" WHERE topic = ?", p.Topic).Scan(&next); err != nil {
			return err
		}
		if !s.callerNow {
			res.Now = now
		}
		res.NextDue = next.Int64
		if held && res.NextDue != 0 && res.NextDue <= now {
			// Due but left (within the grace, or locked by a lease): the
			// engine waits for it apart from the next due time.
			res.HeldDue = res.NextDue
			next = sql.NullInt64{}
			if err := tx.QueryRowContext(ctx, "SELECT MIN(due) FROM "+s.t("q_scheduled")+" WHERE topic = ? AND due > ?", p.Topic, now).Scan(&next); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
				return err
			}
			res.NextDue = next.Int64
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// leasePickSQL picks the next ready messages of a topic (topic, now,
// max): the lease's scan, which the churn test measures.
func (s *Store) leasePickSQL() string { return s.leasePickWith("0", "?") }

// leasePickWith picks and locks the next ready messages of a topic, their
// q_ready rows in lease order (the primary key since schema version 12:
// the delete-marked records purge has not removed yet lie side by side
// there, where a secondary key's each cost a look at their row), and
// their message rows by primary key in the same statement: columns
// msgCols, then q_ready's due and seq, then nowCol; now is the clock's
// SQL expression (see nowSQL) or a placeholder. Reading the message rows
// in a statement of their own was a round trip more per lease. SKIP
// LOCKED passes over a message whose row another transaction holds, as
// over a locked q_ready row; so it never waits, nor deadlocks.
func (s *Store) leasePickWith(nowCol, now string) string {
	return "SELECT STRAIGHT_JOIN " + prefixed("m.", msgCols) + ", q.due, q.seq, " + nowCol + " FROM " + s.t("q_ready") + " q FORCE INDEX (PRIMARY) JOIN " + s.t("message") + " m FORCE INDEX (PRIMARY) ON m.topic = q.topic AND m.id = q.id" + // #nosec G202 -- only table and column names (s.t: the prefix validated at Open) and the clock's expression (nowSQL, or a placeholder) are concatenated; values are parameters
		" WHERE q.topic = ? AND q.due <= " + now + " ORDER BY q.priority, q.due, q.seq LIMIT ? FOR UPDATE SKIP LOCKED"
}

// leaseScanner scans a row of leasePickWith: the message, then its queue
// key and the clock.
type leaseScanner struct {
	rows  *sql.Rows
	extra []any
}

func (l leaseScanner) Scan(dest ...any) error { return l.rows.Scan(append(dest, l.extra...)...) }

// MessageLease implements store.Store.
func (s *Store) MessageLease(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	var out []*store.Record
	err := s.txnPick(ctx, p.Now, func(tx *conntx, now int64) error {
		out = nil
		if p.Max <= 0 {
			return nil
		}
		// A ready row not yet due is passed over, not a barrier. In
		// TimeDB mode the pick reads the clock; picking nothing, the
		// lease needs none.
		var rows *sql.Rows
		var err error
		if s.callerNow {
			rows, err = tx.QueryContext(ctx, s.leasePickWith("0", "?"), p.Topic, now, p.Max)
		} else {
			n := s.nowSQL()
			rows, err = tx.QueryContext(ctx, s.leasePickWith(n, n), p.Topic, p.Max)
		}
		if err != nil {
			return err
		}
		var keys []qkey
		msgs := map[[2]string]*store.Record{}
		for rows.Next() {
			var k qkey
			var picked int64
			r, err := scanMsg(leaseScanner{rows, []any{&k.due, &k.seq, &picked}})
			if err != nil {
				_ = rows.Close()
				return err
			}
			if !s.callerNow {
				now = picked
			}
			k.id, k.top = r.ID, r.Topic
			keys = append(keys, k)
			msgs[[2]string{r.Topic, r.ID}] = r
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		c := counts{}
		if out, err = s.leaseKeys(ctx, tx, c, p, keys, msgs, now); err != nil {
			return err
		}
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) leased(ctx context.Context, tx *conntx, topic, id, receipt string) (*store.Record, error) {
	r, err := s.live(ctx, tx, topic, id)
	if err != nil {
		return nil, err
	}
	if r.State != store.StateInflight {
		return nil, conflict(r, "not leased")
	}
	if r.Receipt != receipt {
		return nil, conflict(r, "stale receipt")
	}
	return r, nil
}

func (s *Store) ack(ctx context.Context, tx *conntx, c counts, topic, id, receipt string, now int64) error {
	r, err := s.leased(ctx, tx, topic, id, receipt)
	if err != nil {
		return err
	}
	if err := s.delQ(ctx, tx, r); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.t("message")+" WHERE topic = ? AND id = ?", topic, id); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("tombstone")+" ("+tombCols+") VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?)", // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		topic, id, r.Seq, now, r.DueAt, r.CreatedAt, r.Deliveries, r.Failures, r.MaxAttempts, nullStr(r.LastError), r.Priority, receipt); err != nil {
		return err
	}
	c.add(topic, store.StateInflight, -1)
	c.add(topic, store.StateAcked, 1)
	return nil
}

// MessageAck implements store.Store.
func (s *Store) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	return s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		c := counts{}
		if err := s.ack(ctx, tx, c, p.Topic, p.ID, p.Receipt, now); err != nil {
			return err
		}
		return s.flushCounts(ctx, tx, c)
	})
}

// MessageAckMany implements store.Store. On the database's clock the
// tombstones' insert reads it (ackMany): no round trip of its own. The
// deletes, the tombstones and the count row go in one round trip
// (writeBatch).
func (s *Store) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) ([]error, error) {
	var out []error
	err := s.txnPick(ctx, p.Now, func(tx *conntx, now int64) error {
		c := counts{}
		w := s.writes(tx)
		var err error
		if out, err = s.ackMany(ctx, tx, w, c, p.Topic, p.Items, now); err != nil {
			return err
		}
		return s.flushCountsOf(ctx, tx, w, c, false) // queued: they go with the COMMIT
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fail counts a failure, as Nack and LeaseExpire do.
func fail(r *store.Record, now, retryAt int64, reason string, final bool) {
	r.Failures++
	r.LastError = reason
	r.LeaseUntil = 0 // Receipt stays: the failed delivery's (store.Record)
	r.UpdatedAt = now
	switch {
	case final || r.Failures >= r.MaxAttempts:
		r.State, r.DeadAt = store.StateDead, now
	case retryAt <= now:
		r.State, r.DueAt = store.StateReady, retryAt
	default:
		r.State, r.DueAt = store.StateScheduled, retryAt
	}
}

// MessageNack implements store.Store.
func (s *Store) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	var r *store.Record
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		var err error
		if r, err = s.leased(ctx, tx, p.Topic, p.ID, p.Receipt); err != nil {
			return err
		}
		c := counts{}
		if err := s.move(ctx, tx, c, r, func() { fail(r, now, now+p.RetryDelay, p.Error, p.Final) }); err != nil {
			return err
		}
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// MessageExtend implements store.Store.
func (s *Store) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	var r *store.Record
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		var err error
		if r, err = s.leased(ctx, tx, p.Topic, p.ID, p.Receipt); err != nil {
			return err
		}
		return s.move(ctx, tx, counts{}, r, func() { r.LeaseUntil, r.UpdatedAt = now+p.LeaseFor, now })
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// LeaseExpiredError is the LastError of a message whose lease ran out.
const LeaseExpiredError = "lease expired"

// LeaseExpire implements store.Store.
func (s *Store) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) ([]*store.Record, error) {
	var out []*store.Record
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		out = nil
		if p.Max <= 0 {
			return nil
		}
		keys, err := s.pick(ctx, tx, "SELECT lease_until, seq, id, topic FROM "+s.t("q_inflight")+" WHERE lease_until <= ? ORDER BY lease_until, seq LIMIT ? FOR UPDATE SKIP LOCKED", now, p.Max)
		if err != nil {
			return err
		}
		c := counts{}
		budget := s.moveBudget()
		for i := 0; i < len(keys); i += moveChunk {
			if budget.spent(i) {
				break // the rest stay expired for the next call
			}
			recs, err := s.expireKeys(ctx, tx, c, keys[i:min(i+moveChunk, len(keys))], now)
			if err != nil {
				return err
			}
			out = append(out, recs...)
		}
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// The DeadList cursor is the (DeadAt, Seq) of the last record returned.
func parseDeadCursor(c string) (int64, uint64, error) {
	a, b, ok := strings.Cut(c, ".")
	if ok {
		deadAt, err1 := strconv.ParseInt(a, 10, 64)
		seq, err2 := strconv.ParseUint(b, 10, 64)
		if err1 == nil && err2 == nil {
			return deadAt, seq, nil
		}
	}
	return 0, 0, fmt.Errorf("mysqlstore: invalid dead-list cursor %q: %w", c, store.ErrBadCursor)
}

// DeadList implements store.Store.
func (s *Store) DeadList(ctx context.Context, p *store.DeadListParams) ([]*store.Record, string, error) {
	var deadAt int64 = -1 << 63
	var seq uint64
	if p.Cursor != "" {
		var err error
		if deadAt, seq, err = parseDeadCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	var out []*store.Record
	next := ""
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		out, next = nil, ""
		if p.Limit <= 0 {
			return nil
		}
		keys, err := s.pick(ctx, tx, "SELECT dead_at, seq, id, topic FROM "+s.t("q_dead")+" WHERE topic = ? AND (dead_at, seq) > (?, ?) ORDER BY dead_at, seq LIMIT ?", p.Topic, deadAt, seq, p.Limit+1)
		if err != nil {
			return err
		}
		more := len(keys) > p.Limit
		if more {
			keys = keys[:p.Limit]
		}
		for _, k := range keys {
			r, err := s.getMsg(ctx, tx, p.Topic, k.id, false)
			if err != nil {
				return err
			}
			if r != nil {
				out = append(out, r)
			}
		}
		if more && len(keys) > 0 {
			last := keys[len(keys)-1]
			next = strconv.FormatInt(last.due, 10) + "." + strconv.FormatUint(last.seq, 10)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// deadOnes returns the dead messages a replay or delete acts on.
func (s *Store) deadOnes(ctx context.Context, tx *conntx, topic, id string, max int) ([]*store.Record, error) {
	if id != "" {
		r, err := s.getMsg(ctx, tx, topic, id, true)
		if err != nil {
			return nil, err
		}
		if r == nil || r.State != store.StateDead {
			return nil, fmt.Errorf("mysqlstore: message %q in topic %q is not dead: %w", id, topic, store.ErrNotFound)
		}
		return []*store.Record{r}, nil
	}
	if max <= 0 {
		return nil, nil
	}
	keys, err := s.pick(ctx, tx, "SELECT dead_at, seq, id, topic FROM "+s.t("q_dead")+" WHERE topic = ? ORDER BY dead_at, seq LIMIT ? FOR UPDATE SKIP LOCKED", topic, max)
	if err != nil {
		return nil, err
	}
	var out []*store.Record
	for _, k := range keys {
		r, err := s.getMsg(ctx, tx, topic, k.id, true)
		if err != nil {
			return nil, err
		}
		if r != nil && r.State == store.StateDead && r.Seq == k.seq {
			out = append(out, r)
		}
	}
	return out, nil
}

// DeadReplay implements store.Store.
func (s *Store) DeadReplay(ctx context.Context, p *store.DeadReplayParams) ([]*store.Record, error) {
	var out []*store.Record
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		var err error
		if out, err = s.deadOnes(ctx, tx, p.Topic, p.ID, p.Max); err != nil {
			return err
		}
		c := counts{}
		for _, r := range out {
			if err := s.move(ctx, tx, c, r, func() {
				r.State, r.DueAt, r.Failures, r.DeadAt, r.UpdatedAt = store.StateReady, now, 0, 0, now
			}); err != nil {
				return err
			}
		}
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeadDelete implements store.Store.
func (s *Store) DeadDelete(ctx context.Context, p *store.DeadDeleteParams) (int, error) {
	n := 0
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		rs, err := s.deadOnes(ctx, tx, p.Topic, p.ID, p.Max)
		if err != nil {
			return err
		}
		c := counts{}
		for _, r := range rs {
			if err := s.delQ(ctx, tx, r); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.t("message")+" WHERE topic = ? AND id = ?", r.Topic, r.ID); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
				return err
			}
			c.add(r.Topic, store.StateDead, -1)
		}
		n = len(rs)
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// DedupPurge implements store.Store: tombstones go in batches of Max, by
// acked_at, each batch one short transaction.
func (s *Store) DedupPurge(ctx context.Context, p *store.DedupPurgeParams) (int, error) {
	n := 0
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		n = 0
		if p.Max <= 0 {
			return nil
		}
		keys, err := s.pick(ctx, tx, "SELECT acked_at, seq, id, topic FROM "+s.t("tombstone")+" WHERE acked_at <= ? ORDER BY acked_at, seq LIMIT ? FOR UPDATE SKIP LOCKED", now-p.Window, p.Max)
		if err != nil {
			return err
		}
		c := counts{}
		// One statement per chunk, by point reads (see keyRows): the
		// tombstones are locked (picked FOR UPDATE), so each is deleted.
		// One at a time, a purge of 1,000 was 1,000 statements, slower
		// than set-based acks make tombstones.
		for i := 0; i < len(keys); i += moveChunk {
			chunk := keys[i:min(i+moveChunk, len(keys))]
			args := make([]any, 0, 2*len(chunk))
			for _, k := range chunk {
				args = append(args, []byte(k.top), []byte(k.id))
			}
			res, err := tx.ExecContext(ctx, "DELETE t FROM "+keyRows(len(chunk), "topic", "id")+" k STRAIGHT_JOIN "+s.t("tombstone")+" t ON t.topic = k.topic AND t.id = k.id", args...) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
			if err != nil {
				return err
			}
			if a, err := res.RowsAffected(); err != nil || a != int64(len(chunk)) {
				return fmt.Errorf("mysqlstore: dedup purge deleted %d of %d locked tombstones (%v)", a, len(chunk), err)
			}
			for _, k := range chunk {
				c.add(k.top, store.StateAcked, -1)
			}
			n += len(chunk)
		}
		return s.flushCounts(ctx, tx, c)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
