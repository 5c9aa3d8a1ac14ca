package mysqlstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

// leaseKeys leases the ready messages of keys, whose message rows the
// pick locked and read (msgs; keys in lease order), moveChunk at a time,
// with one statement per step for a chunk: delete their q_ready rows,
// update them, insert their q_inflight rows. One message at a time (a
// lookup, a delete, an update and an insert each) a lease of 100 was 400
// statements. A key whose message is no longer ready with that Seq is
// passed over, as before.
func (s *Store) leaseKeys(ctx context.Context, tx *conntx, c counts, p *store.MessageLeaseParams, keys []qkey, msgs map[[2]string]*store.Record, now int64) ([]*store.Record, error) {
	var out []*store.Record
	for i := 0; i < len(keys); i += moveChunk {
		chunk := keys[i:min(i+moveChunk, len(keys))]
		var move []*store.Record
		for _, k := range chunk {
			r := msgs[[2]string{p.Topic, k.id}]
			if r == nil || r.State != store.StateReady || r.Seq != k.seq {
				continue
			}
			delete(msgs, [2]string{p.Topic, k.id}) // a key listed twice moves once
			move = append(move, r)
		}
		if len(move) == 0 {
			continue
		}
		if err := s.toInflight(ctx, tx, c, p, move, now); err != nil {
			return nil, err
		}
		out = append(out, move...)
	}
	return out, nil
}

// toInflight leases move (ready or scheduled messages, locked by the
// caller) for p: their queue rows deleted, one UPDATE of their message
// rows, their q_inflight rows inserted; the records are updated in place.
func (s *Store) toInflight(ctx context.Context, w execer, c counts, p *store.MessageLeaseParams, move []*store.Record, now int64) error {
	for _, st := range []store.State{store.StateReady, store.StateScheduled} {
		var from []*store.Record
		for _, r := range move {
			if r.State == st {
				from = append(from, r)
			}
		}
		if err := s.delQMany(ctx, w, st, from); err != nil {
			return err
		}
	}
	args := make([]any, 0, len(move)+4)
	args = append(args, now, p.Token+"-", now+p.LeaseFor, []byte(p.Topic))
	for _, r := range move {
		c.add(r.Topic, r.State, -1)
		r.State, r.UpdatedAt = store.StateInflight, now
		r.Deliveries++
		r.Receipt = p.Token + "-" + strconv.FormatInt(int64(r.Deliveries), 10)
		r.LeaseUntil = now + p.LeaseFor
		c.add(r.Topic, r.State, 1)
		args = append(args, []byte(r.ID))
	}
	// One single-table UPDATE of the rows locked above, by primary key
	// (FORCE INDEX: on a small table the optimizer would rather scan the
	// topic's range and wait on other transactions' rows). The same
	// deliveries and receipt as computed here: assignments run left to
	// right, so the receipt reads the incremented count. Not a
	// multi-table UPDATE driven by a derived key table (keyRows), whose
	// temporary table crashed MariaDB 10.11.19 once under load (SIGSEGV
	// in multi_update::initialize_tables, cleaning up a failed
	// create_tmp_table).
	if _, err := w.ExecContext(ctx, "UPDATE "+s.t("message")+" m FORCE INDEX (PRIMARY) "+ // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
		"SET m.state = 3, m.updated = ?, m.deliveries = m.deliveries + 1, m.receipt = CONCAT(?, m.deliveries), m.lease_until = ? "+
		"WHERE m.topic = ? AND m.id IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(move)), ", ")+")", args...); err != nil {
		return err
	}
	return s.addQMany(ctx, w, move)
}

// ackMany acks items with one statement per step for all of them: lock
// their message rows (read without payload and headers: a tombstone keeps
// neither), then (for those leased with the receipt given)
// delete their q_inflight rows and message rows and insert their
// tombstones. Items are judged in order, as one ack at a time would: a
// second ack of an id this call acked is a conflict. One at a time, an
// ack was four statements.
//
// Its writes go through w (tx, or a writeBatch of tx): its reads come
// before them.
func (s *Store) ackMany(ctx context.Context, tx *conntx, w execer, c counts, topic string, items []store.AckItem, now int64) ([]error, error) {
	out := make([]error, len(items))
	msgs := map[[2]string]*store.Record{}
	var keys []qkey
	for _, it := range items {
		if _, ok := msgs[[2]string{topic, it.ID}]; !ok {
			msgs[[2]string{topic, it.ID}] = nil
			keys = append(keys, qkey{top: topic, id: it.ID})
		}
	}
	for i := 0; i < len(keys); i += moveChunk {
		got, err := s.lockMsgs(ctx, tx, keys[i:min(i+moveChunk, len(keys))], readNoBody)
		if err != nil {
			return nil, err
		}
		for k, r := range got {
			msgs[k] = r
		}
	}
	acked := map[string]*store.Record{}
	var done []*store.Record
	var missing []string // ids without a message: acked before, or unknown
	for i, it := range items {
		r := msgs[[2]string{topic, it.ID}]
		switch {
		case acked[it.ID] != nil:
			out[i] = conflict(acked[it.ID], "acked")
		case r == nil:
			missing = append(missing, it.ID)
		case r.State != store.StateInflight:
			out[i] = conflict(r, "not leased")
		case r.Receipt != it.Receipt:
			out[i] = conflict(r, "stale receipt")
		default:
			acked[it.ID] = &store.Record{Topic: topic, ID: it.ID, State: store.StateAcked}
			done = append(done, r)
		}
	}
	if len(missing) > 0 {
		tombs := map[[2]string]*store.Record{}
		for i := 0; i < len(missing); i += moveChunk {
			if err := s.getTombs(ctx, tx, topic, missing[i:min(i+moveChunk, len(missing))], tombs); err != nil {
				return nil, err
			}
		}
		for i, it := range items {
			if out[i] != nil || msgs[[2]string{topic, it.ID}] != nil {
				continue
			}
			if t := tombs[[2]string{topic, it.ID}]; t != nil {
				out[i] = conflict(t, "acked")
			} else {
				out[i] = notFound(topic, it.ID)
			}
		}
	}
	// The acked_at of the tombstones: now, or with now 0 (the database's
	// clock, not read yet: see MessageAckMany) the clock read by the
	// insert itself.
	ackedAt := "?"
	if now == 0 && !s.callerNow {
		ackedAt = s.nowSQL()
	}
	tomb := "(?, ?, ?, " + ackedAt + ", ?, ?, ?, ?, ?, ?, ?, ?)"
	for i := 0; i < len(done); i += moveChunk {
		chunk := done[i:min(i+moveChunk, len(done))]
		del := make([]any, 0, 1+3*len(chunk))
		ins := make([]any, 0, 12*len(chunk))
		for _, r := range chunk {
			del = append(del, []byte(r.ID), r.LeaseUntil, r.Seq)
			ins = append(ins, r.Topic, r.ID, r.Seq)
			if ackedAt == "?" {
				ins = append(ins, now)
			}
			// The receipt that acks it (r's, which the item's equals).
			ins = append(ins, r.DueAt, r.CreatedAt, r.Deliveries, r.Failures, r.MaxAttempts, nullStr(r.LastError), r.Priority, r.Receipt)
			c.add(topic, store.StateInflight, -1)
			c.add(topic, store.StateAcked, 1)
		}
		// The message rows and their q_inflight rows in one statement (two
		// were a round trip more per ack), each by its primary key.
		if _, err := w.ExecContext(ctx, "DELETE m, q FROM "+keyRows(len(chunk), "id", "lease_until", "seq")+" k STRAIGHT_JOIN "+s.t("message")+" m ON m.topic = ? AND m.id = k.id "+ // #nosec G202 -- only table names (s.t: the prefix validated at Open) and placeholders are concatenated; values are parameters
			"LEFT JOIN "+s.t("q_inflight")+" q ON q.lease_until = k.lease_until AND q.seq = k.seq", append(del, []byte(topic))...); err != nil {
			return nil, err
		}
		if _, err := w.ExecContext(ctx, "INSERT INTO "+s.t("tombstone")+" (topic, id, seq, acked_at, due, created, deliveries, failures, max_attempts, last_error, priority, receipt) VALUES "+strings.TrimSuffix(strings.Repeat(tomb+", ", len(chunk)), ", "), ins...); err != nil { // #nosec G202 -- as above, and the clock's expression (nowSQL: fixed text or an integer)
			return nil, err
		}
	}
	return out, nil
}
