package mysqlstore

import (
	"bytes"
	"context"
	"maps"
	"strings"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/sqlcodec"
)

// insertChunk bounds the rows of one multi-row insert, and
// insertChunkBytes their payloads' bytes (a statement must fit in
// max_allowed_packet, 16 MiB by default, escaped payloads included).
const (
	insertChunk      = 500
	insertChunkBytes = 4 << 20
)

// insertMany is MessageInsertMany's transaction, set-based: one locking
// read of the ids' messages, then the new messages in multi-row inserts
// (message rows, read back for their seq; one locking read of their
// tombstones, see ackedMeanwhile; then queue rows), the counts once. A
// batch of 100 is about ten statements where one message at a time took
// four each (about 400), which ran past the call's time bound under load.
//
// The careful one-message path (insertOne) remains for what a multi-row
// insert cannot settle: an id repeated in the batch (the first occurrence
// is sent, the others are its duplicates), and the messages of a chunk
// whose insert failed on a duplicate key, because a concurrent send of one
// of its ids committed after the lookup (read committed locks no gap).
// The failed statement alone is rolled back; those messages are then sent
// one at a time, in batch order.
func (s *Store) insertMany(ctx context.Context, tx *conntx, p *store.MessageInsertManyParams, now int64) ([]store.InsertResult, error) {
	out := make([]store.InsertResult, len(p.Messages))
	keys := make([]qkey, 0, len(p.Messages))
	first := make(map[string]int, len(p.Messages)) // id -> index of its first occurrence
	var repeated []int                             // later occurrences of an id, in order
	for i := range p.Messages {
		id := p.Messages[i].ID
		if _, ok := first[id]; ok {
			repeated = append(repeated, i)
			continue
		}
		first[id] = i
		if !p.Messages[i].Generated {
			// An id the engine generated is new (see
			// store.InsertMessage): not looked up. Should it clash all
			// the same, the insert fails on the duplicate key and it is
			// sent the careful way.
			keys = append(keys, qkey{top: p.Topic, id: id})
		}
	}
	// With sendReadsClock the transaction's first statement reads the
	// clock (now is 0 until then).
	clockUnread := s.sendReadsClock()
	var existing map[[2]string]*store.Record
	for i := 0; i < len(keys); i += insertChunk {
		var clock *int64
		if clockUnread {
			clock = &now
		}
		got, err := s.lockMsgsAt(ctx, tx, keys[i:min(i+insertChunk, len(keys))], readAll, clock)
		if err != nil {
			return nil, err
		}
		clockUnread = false
		if existing == nil {
			existing = got
		} else {
			maps.Copy(existing, got)
		}
	}
	if h := s.afterLookup; h != nil {
		h()
	}
	// The new messages, in batch order.
	var fresh []int
	for i := range p.Messages {
		if first[p.Messages[i].ID] != i {
			continue
		}
		if ex := existing[[2]string{p.Topic, p.Messages[i].ID}]; ex != nil {
			out[i] = store.InsertResult{Record: ex, Duplicate: true}
			continue
		}
		fresh = append(fresh, i)
	}
	c := counts{}
	var sent []*store.Record
	for len(fresh) > 0 {
		n, size := 0, 0
		for n < len(fresh) && n < insertChunk && (n == 0 || size+len(p.Messages[fresh[n]].Payload) <= insertChunkBytes) {
			size += len(p.Messages[fresh[n]].Payload)
			n++
		}
		chunk := fresh[:n]
		fresh = fresh[n:]
		var recs []*store.Record
		var err error
		if clockUnread {
			clockUnread = false
			msgs := make([]*store.InsertMessage, len(chunk))
			for j, i := range chunk {
				msgs[j] = &p.Messages[i]
			}
			recs, now, err = s.insertRowsReadingClock(ctx, tx, p.Topic, msgs)
			if isDup(err) {
				// The failed insert answered no clock: insertOne needs one.
				var clockErr error
				if now, clockErr = s.dbNow(ctx, tx); clockErr != nil {
					return nil, clockErr
				}
			}
		} else {
			recs = make([]*store.Record, len(chunk))
			for j, i := range chunk {
				recs[j] = newRecord(p.Topic, &p.Messages[i], now)
			}
			err = s.insertRows(ctx, tx, recs)
		}
		if isDup(err) {
			// Sent now, one at a time, so that seqs stay in batch order.
			for _, i := range chunk {
				if out[i], err = s.insertOne(ctx, tx, c, p.Topic, &p.Messages[i], now); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		var ids []string
		for j, i := range chunk {
			if !p.Messages[i].Generated {
				ids = append(ids, recs[j].ID)
			}
		}
		acked, err := s.ackedMeanwhile(ctx, tx, p.Topic, ids)
		if err != nil {
			return nil, err
		}
		for j, i := range chunk {
			if t := acked[recs[j].ID]; t != nil {
				out[i] = store.InsertResult{Record: t, Duplicate: true}
				continue
			}
			out[i] = store.InsertResult{Record: recs[j]}
			c.add(p.Topic, recs[j].State, 1)
			sent = append(sent, recs[j])
		}
	}
	// The queue rows, the count row and the topic row's read go in one
	// round trip (writeBatch; insertOne's reads send what is queued).
	w := s.writes(tx)
	if err := s.addQMany(ctx, w, sent); err != nil {
		return nil, err
	}
	for _, i := range repeated {
		res, err := s.insertOne(ctx, tx, c, p.Topic, &p.Messages[i], now)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	if len(c) == 0 && len(p.Messages) > 0 {
		// Duplicates only: no count moves, but a send still makes a
		// deleted topic again (flushCounts does it otherwise).
		if err := s.topicRow(ctx, w, p.Topic, true); err != nil {
			return nil, err
		}
		return out, nil
	}
	if err := s.flushCountsOf(ctx, tx, w, c, true); err != nil {
		return nil, err
	}
	return out, nil
}

// newRecord is the record m makes in topic, sent at now.
func newRecord(topic string, m *store.InsertMessage, now int64) *store.Record {
	r := &store.Record{Topic: topic, ID: m.ID, Payload: bytes.Clone(m.Payload), Headers: maps.Clone(m.Headers), DueAt: m.Due(now), CreatedAt: now, UpdatedAt: now, MaxAttempts: m.MaxAttempts, State: store.StateScheduled, Priority: m.Priority}
	if r.DueAt <= now {
		r.State = store.StateReady
	}
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	return r
}

// insertRows inserts the message rows of recs with one statement and sets
// their Seq: a multi-row insert numbers its rows in order, consecutively
// from LAST_INSERT_ID() when the server's settings say so (see
// sessionChecks), else they are read back.
func (s *Store) insertRows(ctx context.Context, tx *conntx, recs []*store.Record) error {
	args := make([]any, 0, 10*len(recs))
	for _, r := range recs {
		args = append(args, r.Topic, r.ID, int(r.State), r.Payload, sqlcodec.EncodeHeaders(r.Headers), r.DueAt, r.CreatedAt, r.UpdatedAt, r.MaxAttempts, r.Priority)
	}
	res, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("message")+" (topic, id, state, payload, headers, due, created, updated, max_attempts, priority) VALUES "+tuples(len(recs), 10), args...) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
	if err != nil {
		return err
	}
	first, err := res.LastInsertId()
	if err != nil {
		return err
	}
	return s.setSeqs(ctx, tx, recs, first)
}

// insertRowsReadingClock is insertRows for a transaction that has not
// read the database's clock yet (see MessageInsertMany): the clock is
// read into a session variable by the insert's own query, which computes
// the rows' due time and state from it as newRecord does, and answers it
// with the first row's seq; one round trip where the clock's read was
// one more. It returns the records of msgs, sent at that clock. On a
// failed insert (a duplicate key: see insertMany) it returns no clock.
func (s *Store) insertRowsReadingClock(ctx context.Context, tx *conntx, topic string, msgs []*store.InsertMessage) ([]*store.Record, int64, error) {
	// A message's due time is @now * rel + base: a delay after the clock
	// (rel 1, base the delay), or an instant (rel 0, base the instant).
	const due = "@dq_now * ? + ?"
	const row = "(?, ?, IF(" + due + " <= @dq_now, 2, 1), ?, ?, " + due + ", @dq_now, @dq_now, ?, ?)"
	args := make([]any, 0, 10*len(msgs))
	for _, m := range msgs {
		rel, base := 0, m.DueAt
		if m.Relative {
			rel, base = 1, m.Delay
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		args = append(args, topic, m.ID, rel, base, payload, sqlcodec.EncodeHeaders(m.Headers), rel, base, m.MaxAttempts, m.Priority)
	}
	w := s.writes(tx)
	// #nosec G202 -- the clock's expression (nowSQL: fixed text or an integer)
	if _, err := w.ExecContext(ctx, "SET @dq_now = "+s.nowSQL()); err != nil {
		return nil, 0, err
	}
	if _, err := w.ExecContext(ctx, "INSERT INTO "+s.t("message")+" (topic, id, state, payload, headers, due, created, updated, max_attempts, priority) VALUES "+strings.TrimSuffix(strings.Repeat(row+", ", len(msgs)), ", "), args...); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
		return nil, 0, err
	}
	var now, first int64
	if err := w.QueryRowContext(ctx, "SELECT @dq_now, LAST_INSERT_ID()").Scan(&now, &first); err != nil {
		return nil, 0, err
	}
	recs := make([]*store.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = newRecord(topic, m, now)
	}
	if err := s.setSeqs(ctx, tx, recs, first); err != nil {
		return nil, 0, err
	}
	return recs, now, nil
}

// setSeqs sets the Seq of recs, rows just inserted by one statement whose
// first AUTO_INCREMENT value was first: numbered consecutively from it
// when the server's settings say so (see sessionChecks), else read back.
func (s *Store) setSeqs(ctx context.Context, tx *conntx, recs []*store.Record, first int64) error {
	if len(recs) == 1 || s.consecutiveSeq {
		for i, r := range recs {
			r.Seq = uint64(first) + uint64(i) // #nosec G115 -- AUTO_INCREMENT is positive
		}
		return nil
	}
	args := []any{recs[0].Topic} // all of one topic
	byID := make(map[string]*store.Record, len(recs))
	for _, r := range recs {
		args = append(args, r.ID)
		byID[r.ID] = r
	}
	rows, err := tx.QueryContext(ctx, "SELECT id, seq FROM "+s.t("message")+" WHERE topic = ? AND id IN "+tuples(1, len(recs)), args...) // #nosec G202 -- as above
	if err != nil {
		return err
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var id []byte
		var seq uint64
		if err := rows.Scan(&id, &seq); err != nil {
			return err
		}
		if r := byID[string(id)]; r != nil && r.Seq == 0 {
			r.Seq = seq
			got++
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if got != len(recs) {
		return errRetry // cannot be: the rows were inserted by this transaction
	}
	return nil
}

// tombLock makes a read of tombstones a locking one, which reads the
// latest committed rows whatever the transaction's snapshot: what
// ackedMeanwhile must find is an ack that committed while this
// transaction ran. At READ COMMITTED, where the server's transactions
// run, it locks nothing that does not exist.
const tombLock = " LOCK IN SHARE MODE"

// ackedMeanwhile reads the tombstones of ids, whose messages this
// transaction just inserted, and deletes the messages that have one, which
// it answers by id (an id the engine generated is new: not passed). Only a message acked after this transaction
// looked its id up has: sent by another transaction, leased and acked in
// between (no lock stops that, since there was no row to lock). Any ack
// that did is committed by now (an uncommitted one would have made the
// insert wait), so a locking read finds its tombstone; and no later ack
// can make one while this transaction holds the new row. A resend of an
// id acked long before is answered here too: inserted, then taken back.
func (s *Store) ackedMeanwhile(ctx context.Context, tx *conntx, topic string, ids []string) (map[string]*store.Record, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tombs := map[[2]string]*store.Record{}
	if err := s.getTombs(ctx, tx, topic, ids, tombs); err != nil {
		return nil, err
	}
	if len(tombs) == 0 {
		return nil, nil
	}
	out := make(map[string]*store.Record, len(tombs))
	args := []any{topic}
	for k, t := range tombs {
		out[k[1]] = t
		args = append(args, k[1])
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.t("message")+" WHERE topic = ? AND id IN "+tuples(1, len(out)), args...); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
		return nil, err
	}
	return out, nil
}

// getTombs adds the tombstones of ids in topic to into (a locking read).
func (s *Store) getTombs(ctx context.Context, tx *conntx, topic string, ids []string, into map[[2]string]*store.Record) error {
	args := make([]any, 0, 1+len(ids))
	args = append(args, topic)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := tx.QueryContext(ctx, "SELECT "+tombCols+" FROM "+s.t("tombstone")+" WHERE topic = ? AND id IN "+tuples(1, len(ids))+tombLock, args...) // #nosec G202 -- only a table name (s.t: the prefix validated at Open), column names and placeholders are concatenated; values are parameters
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanTomb(rows)
		if err != nil {
			return err
		}
		into[[2]string{r.Topic, r.ID}] = r
	}
	return rows.Err()
}

// insertOne sends one message the careful way: a locking lookup, the
// insert, whose duplicate-key failure (a concurrent send of the id
// committed after the lookup) makes it a duplicate, then the tombstone
// (ackedMeanwhile).
func (s *Store) insertOne(ctx context.Context, tx *conntx, c counts, topic string, m *store.InsertMessage, now int64) (store.InsertResult, error) {
	ex, err := s.getMsg(ctx, tx, topic, m.ID, true)
	if err != nil {
		return store.InsertResult{}, err
	}
	if ex != nil {
		return store.InsertResult{Record: ex, Duplicate: true}, nil
	}
	r := newRecord(topic, m, now)
	res, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("message")+" (topic, id, state, payload, headers, due, created, updated, max_attempts, priority) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		r.Topic, r.ID, int(r.State), r.Payload, sqlcodec.EncodeHeaders(r.Headers), r.DueAt, now, now, r.MaxAttempts, r.Priority)
	if isDup(err) {
		// A concurrent insert of the same id committed after the lookup
		// (read committed locks no gap): the statement alone failed; the
		// row now exists.
		if ex, err = s.getMsg(ctx, tx, topic, m.ID, true); err != nil {
			return store.InsertResult{}, err
		}
		if ex == nil {
			return store.InsertResult{}, errRetry
		}
		return store.InsertResult{Record: ex, Duplicate: true}, nil
	}
	if err != nil {
		return store.InsertResult{}, err
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return store.InsertResult{}, err
	}
	r.Seq = uint64(seq) // #nosec G115 -- AUTO_INCREMENT is positive
	if !m.Generated {
		acked, err := s.ackedMeanwhile(ctx, tx, topic, []string{r.ID})
		if err != nil {
			return store.InsertResult{}, err
		}
		if t := acked[r.ID]; t != nil {
			return store.InsertResult{Record: t, Duplicate: true}, nil
		}
	}
	if err := s.addQ(ctx, tx, r); err != nil {
		return store.InsertResult{}, err
	}
	c.add(r.Topic, r.State, 1)
	return store.InsertResult{Record: r}, nil
}
