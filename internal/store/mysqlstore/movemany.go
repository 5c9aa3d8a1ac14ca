package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

// moveChunk is how many messages a promotion or lease expiry moves with
// one set of statements. Moving a backlog one message at a time (a
// lookup, an update, a delete and an insert each) ran at about 90
// messages/s per server under load; a chunk costs the same five
// statements whatever its size.
const moveChunk = 500

// tuples is "(?, ?), (?, ?), …": n row constructors of width
// placeholders, for IN lists of composite keys and multi-row VALUES.
func tuples(n, width int) string {
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", width), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
}

// keyRows is "(SELECT ? AS a, ? AS b UNION ALL VALUES (?, ?), …)": a derived
// table of n rows of the named columns, to join the rows a statement acts
// on by their primary key. A locking statement must reach its rows by
// point reads: given an IN list, MariaDB may read the whole range of the
// topic instead (it did on small tables), and a locking read waits for
// every uncommitted row it passes, such as an open application
// transaction's send. Driven by this table (STRAIGHT_JOIN), each row is
// one primary-key lookup (eq_ref).
func keyRows(n int, cols ...string) string {
	var b strings.Builder
	b.WriteString("(SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("? AS " + c)
	}
	if n > 1 {
		// The other rows as one table value constructor: a UNION of n
		// SELECTs would be n queries for the server to plan.
		b.WriteString(" UNION ALL VALUES ")
		b.WriteString(tuples(n-1, len(cols)))
	}
	b.WriteString(")")
	return b.String()
}

// prefixed is cols ("a, b") with each name prefixed ("m.a, m.b").
func prefixed(p, cols string) string {
	return p + strings.ReplaceAll(cols, ", ", ", "+p)
}

// msgRead is how much of a message row lockMsgs reads.
type msgRead uint8

const (
	readMove   msgRead = iota // the fields a promotion needs: topic, id, seq, state, due, priority
	readNoBody                // every field but the payload and headers (msgColsNoBody)
	readAll                   // every field (msgCols)
)

// lockMsgs reads and locks (FOR UPDATE) the message rows of keys, in
// primary-key order whatever the keys' order (so that two calls lock in
// one order), one point read each (see keyRows), and answers them by topic
// and id, with the fields what says.
func (s *Store) lockMsgs(ctx context.Context, tx *conntx, keys []qkey, what msgRead) (map[[2]string]*store.Record, error) {
	return s.lockMsgsAt(ctx, tx, keys, what, nil)
}

// lockMsgsAt is lockMsgs that, with now not nil, also reads the
// database's clock into it in the same round trip (a result set before
// the rows': Store.multi only), for a transaction whose first statement
// this is.
func (s *Store) lockMsgsAt(ctx context.Context, tx *conntx, keys []qkey, what msgRead, now *int64) (map[[2]string]*store.Record, error) {
	cols := msgCols
	switch what {
	case readMove:
		cols = "topic, id, seq, state, due, priority"
	case readNoBody:
		cols = msgColsNoBody
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, func(a, b qkey) int { return cmp.Or(strings.Compare(a.top, b.top), strings.Compare(a.id, b.id)) })
	args := make([]any, 0, 2*len(keys))
	for _, k := range sorted {
		args = append(args, []byte(k.top), []byte(k.id))
	}
	q := "SELECT STRAIGHT_JOIN " + prefixed("m.", cols) + " FROM " + keyRows(len(keys), "topic", "id") + " k JOIN " + s.t("message") + " m ON m.topic = k.topic AND m.id = k.id FOR UPDATE" // #nosec G202 -- only a table name (s.t: the prefix validated at Open), column names and placeholders are concatenated; values are parameters
	if now != nil {
		q = "SELECT " + s.nowSQL() + ";\n" + q
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if now != nil {
		if err := scanClock(rows, now); err != nil {
			return nil, err
		}
	}
	out := make(map[[2]string]*store.Record, len(keys))
	for rows.Next() {
		var r *store.Record
		if what != readMove {
			if r, err = scanMsgOf(rows, what == readAll); err != nil {
				return nil, err
			}
		} else {
			r = &store.Record{}
			var state uint8 // a value out of range fails the scan
			var topic, id []byte
			if err := rows.Scan(&topic, &id, &r.Seq, &state, &r.DueAt, &r.Priority); err != nil {
				return nil, err
			}
			r.Topic, r.ID, r.State = string(topic), string(id), store.State(state)
		}
		out[[2]string{r.Topic, r.ID}] = r
	}
	return out, rows.Err()
}

// scanClock reads the clock's result set (one row, one column) into now
// and moves rows to the next result set.
func scanClock(rows *sql.Rows, now *int64) error {
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("mysqlstore: the clock's read returned no row")
	}
	if err := rows.Scan(now); err != nil {
		return err
	}
	return nextResultSet(rows, "a query of the clock and a read")
}

// nextResultSet moves rows to the second result set of a query of two
// (what names them in the error when the server answered one).
func nextResultSet(rows *sql.Rows, what string) error {
	if rows.NextResultSet() {
		return nil
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return errors.New("mysqlstore: " + what + " returned one result set, not two")
}

// delQMany deletes the queue rows of recs, which are all in one state, by
// their keys: q_scheduled, q_dead (topic, time, seq); q_ready (topic,
// priority, due, seq); q_inflight (lease_until, seq).
func (s *Store) delQMany(ctx context.Context, tx execer, st store.State, recs []*store.Record) error {
	if len(recs) == 0 {
		return nil
	}
	var table string
	args := make([]any, 0, 3*len(recs))
	for _, r := range recs {
		switch st {
		case store.StateScheduled:
			table = "q_scheduled"
			args = append(args, []byte(r.Topic), r.DueAt, r.Seq)
		case store.StateReady:
			table = "q_ready"
			args = append(args, []byte(r.Topic), r.Priority, r.DueAt, r.Seq)
		case store.StateDead:
			table = "q_dead"
			args = append(args, []byte(r.Topic), r.DeadAt, r.Seq)
		case store.StateInflight:
			table = "q_inflight"
			args = append(args, r.LeaseUntil, r.Seq)
		}
	}
	cols := map[string][]string{"q_scheduled": {"topic", "due", "seq"}, "q_ready": {"topic", "priority", "due", "seq"}, "q_dead": {"topic", "dead_at", "seq"}, "q_inflight": {"lease_until", "seq"}}[table]
	on := make([]string, len(cols))
	for i, c := range cols {
		on[i] = "q." + c + " = k." + c
	}
	_, err := tx.ExecContext(ctx, "DELETE q FROM "+keyRows(len(recs), cols...)+" k STRAIGHT_JOIN "+s.t(table)+" q ON "+strings.Join(on, " AND "), args...) // #nosec G202 -- only a table name (s.t: the prefix validated at Open), its key's column names and placeholders are concatenated; values are parameters
	return err
}

// addQMany inserts the queue rows of recs (as addQ does, in one
// statement per state).
func (s *Store) addQMany(ctx context.Context, tx execer, recs []*store.Record) error {
	by := map[store.State][]any{}
	n := map[store.State]int{}
	for _, r := range recs {
		switch r.State {
		case store.StateScheduled:
			by[r.State] = append(by[r.State], r.Topic, r.DueAt, r.Seq, r.ID)
		case store.StateReady:
			by[r.State] = append(by[r.State], r.Topic, r.DueAt, r.Seq, r.ID, r.Priority)
		case store.StateInflight:
			by[r.State] = append(by[r.State], r.LeaseUntil, r.Seq, r.Topic, r.ID)
		case store.StateDead:
			by[r.State] = append(by[r.State], r.Topic, r.DeadAt, r.Seq, r.ID)
		}
		n[r.State]++
	}
	for _, st := range []store.State{store.StateScheduled, store.StateReady, store.StateInflight, store.StateDead} {
		if n[st] == 0 {
			continue
		}
		var q string
		switch st {
		case store.StateScheduled:
			q = "INSERT INTO " + s.t("q_scheduled") + " (topic, due, seq, id) VALUES " + tuples(n[st], 4)
		case store.StateReady:
			q = "INSERT INTO " + s.t("q_ready") + " (topic, due, seq, id, priority) VALUES " + tuples(n[st], 5)
		case store.StateInflight:
			q = "INSERT INTO " + s.t("q_inflight") + " (lease_until, seq, topic, id) VALUES " + tuples(n[st], 4)
		case store.StateDead:
			q = "INSERT INTO " + s.t("q_dead") + " (topic, dead_at, seq, id) VALUES " + tuples(n[st], 4)
		}
		if _, err := tx.ExecContext(ctx, q, by[st]...); err != nil {
			return err
		}
	}
	return nil
}

// promoteKeys makes the scheduled messages of keys (locked rows of
// q_scheduled) ready, with one statement per step for all of them: lock
// their message rows, change them, delete their q_scheduled rows, insert
// their q_ready rows. A key whose message is no longer scheduled with
// that Seq is left alone, as a one-by-one move would.
func (s *Store) promoteKeys(ctx context.Context, tx *conntx, c counts, topic string, keys []qkey, now int64) (int, error) {
	msgs, err := s.lockMsgs(ctx, tx, keys, readMove)
	if err != nil {
		return 0, err
	}
	var move []*store.Record
	args := []any{now}
	for _, k := range keys {
		r := msgs[[2]string{topic, k.id}]
		if r == nil || r.State != store.StateScheduled || r.Seq != k.seq {
			continue
		}
		delete(msgs, [2]string{topic, k.id}) // a key listed twice moves once
		move = append(move, r)
		args = append(args, r.Topic, r.ID)
	}
	if len(move) == 0 {
		return 0, nil
	}
	if err := s.delQMany(ctx, tx, store.StateScheduled, move); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+s.t("message")+" SET state = 2, updated = ? WHERE (topic, id) IN ("+tuples(len(move), 2)+")", args...); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
		return 0, err
	}
	for _, r := range move {
		c.add(r.Topic, r.State, -1)
		r.State, r.UpdatedAt = store.StateReady, now
		c.add(r.Topic, r.State, 1)
	}
	return len(move), s.addQMany(ctx, tx, move)
}

// expireKeys fails the inflight messages of keys (locked rows of
// q_inflight, of any topics) as lease expiries — ready again, due now, or
// dead once out of attempts — with one statement per step for all of
// them, and answers them as changed, in the keys' order.
func (s *Store) expireKeys(ctx context.Context, tx *conntx, c counts, keys []qkey, now int64) ([]*store.Record, error) {
	msgs, err := s.lockMsgs(ctx, tx, keys, readAll)
	if err != nil {
		return nil, err
	}
	var moved, old []*store.Record
	var readyArgs, deadArgs []any
	for _, k := range keys {
		r := msgs[[2]string{k.top, k.id}]
		if r == nil || r.State != store.StateInflight || r.Seq != k.seq {
			continue
		}
		delete(msgs, [2]string{k.top, k.id})
		o := *r
		old = append(old, &o)
		c.add(r.Topic, r.State, -1)
		fail(r, now, now, LeaseExpiredError, false)
		c.add(r.Topic, r.State, 1)
		if r.State == store.StateDead {
			deadArgs = append(deadArgs, r.Topic, r.ID)
		} else {
			readyArgs = append(readyArgs, r.Topic, r.ID)
		}
		moved = append(moved, r)
	}
	if len(moved) == 0 {
		return nil, nil
	}
	if err := s.delQMany(ctx, tx, store.StateInflight, old); err != nil {
		return nil, err
	}
	// The columns fail() changes; failures counts up from the locked row.
	const set = "failures = failures + 1, last_error = ?, lease_until = 0, updated = ?"
	if n := len(readyArgs) / 2; n > 0 {
		args := append([]any{now, LeaseExpiredError, now}, readyArgs...)
		if _, err := tx.ExecContext(ctx, "UPDATE "+s.t("message")+" SET state = 2, due = ?, "+set+" WHERE (topic, id) IN ("+tuples(n, 2)+")", args...); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
			return nil, err
		}
	}
	if n := len(deadArgs) / 2; n > 0 {
		args := append([]any{now, LeaseExpiredError, now}, deadArgs...)
		if _, err := tx.ExecContext(ctx, "UPDATE "+s.t("message")+" SET state = 4, dead_at = ?, "+set+" WHERE (topic, id) IN ("+tuples(n, 2)+")", args...); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
			return nil, err
		}
	}
	return moved, s.addQMany(ctx, tx, moved)
}
