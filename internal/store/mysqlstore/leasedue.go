package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"slices"

	"github.com/delayq/delayq/internal/store"
)

var _ store.NextDueLeaser = (*Store)(nil)

// MessageLeaseDue implements store.DueLeaser.
func (s *Store) MessageLeaseDue(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	res, err := s.leaseDue(ctx, p, false)
	if err != nil {
		return nil, err
	}
	return res.Records, nil
}

// MessageLeaseDueNext implements store.NextDueLeaser.
func (s *Store) MessageLeaseDueNext(ctx context.Context, p *store.MessageLeaseParams) (*store.LeaseDueResult, error) {
	return s.leaseDue(ctx, p, true)
}

// ReportsNextDue implements store.NextDueLeaser.
func (s *Store) ReportsNextDue() bool { return true }

// leaseDue leases up to Max of the topic's ready messages and its
// scheduled ones that are due, in (priority, due, seq) order among the
// first Max of each: a message that came due is leased straight from
// q_scheduled in the lease's transaction, where a promotion and then a
// lease took two transactions and two redo-log flushes. With next it also
// reads the earliest due time left in q_scheduled (in the same
// transaction: at most the first due time after the lease).
func (s *Store) leaseDue(ctx context.Context, p *store.MessageLeaseParams, next bool) (*store.LeaseDueResult, error) {
	res := &store.LeaseDueResult{}
	err := s.txnPick(ctx, p.Now, func(tx *conntx, now int64) error {
		*res = store.LeaseDueResult{}
		var clock int64 // TimeDB: the latest clock a pick read (0: none picked)
		var cands []*store.Record
		if p.Max > 0 {
			var err error
			if cands, clock, err = s.pickBoth(ctx, tx, p.Topic, now, p.Max); err != nil {
				return err
			}
		}
		if !s.callerNow && clock != 0 {
			now = clock
		}
		slices.SortFunc(cands, func(a, b *store.Record) int {
			return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.DueAt, b.DueAt), cmp.Compare(a.Seq, b.Seq))
		})
		cands = cands[:min(len(cands), max(p.Max, 0))]
		// The moves and the count row are sent with the next due time's
		// read, in one round trip (writeBatch).
		c := counts{}
		w := s.writes(tx)
		for i := 0; i < len(cands); i += moveChunk {
			if err := s.toInflight(ctx, w, c, p, cands[i:min(i+moveChunk, len(cands))], now); err != nil {
				return err
			}
		}
		if err := s.flushCountsOf(ctx, tx, w, c, false); err != nil {
			return err
		}
		res.Records = cands
		if !next {
			return nil // the queued writes go with the COMMIT
		}
		var nextDue sql.NullInt64
		if !s.callerNow && clock == 0 { // nothing picked: the clock with the next due
			if err := w.QueryRowContext(ctx, "SELECT "+s.nowSQL()+", (SELECT MIN(due) FROM "+s.t("q_scheduled")+" WHERE topic = ?)", p.Topic).Scan(&now, &nextDue); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) and the clock's expression (nowSQL) are concatenated; values are parameters
				return err
			}
		} else if err := w.QueryRowContext(ctx, "SELECT MIN(due) FROM "+s.t("q_scheduled")+" WHERE topic = ?", p.Topic).Scan(&nextDue); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
			return err
		}
		res.NextDue = nextDue.Int64
		if !s.callerNow {
			res.Now = now
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// pickBoth picks the topic's ready messages and then its scheduled ones
// that are due (pickDue), both in one round trip when the connection
// takes several statements per query (Store.multi): two result sets.
func (s *Store) pickBoth(ctx context.Context, tx *conntx, topic string, now int64, limit int) ([]*store.Record, int64, error) {
	if !s.multi {
		var out []*store.Record
		var clock int64
		for _, st := range []store.State{store.StateReady, store.StateScheduled} {
			recs, picked, err := s.pickDue(ctx, tx, st, topic, now, limit)
			if err != nil {
				return nil, 0, err
			}
			clock = max(clock, picked)
			out = append(out, recs...)
		}
		return out, clock, nil
	}
	qr, ar := s.pickDueSQL(store.StateReady, topic, now, limit)
	qs, as := s.pickDueSQL(store.StateScheduled, topic, now, limit)
	rows, err := tx.QueryContext(ctx, qr+";\n"+qs, append(ar, as...)...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out, clock, err := s.scanPick(rows, store.StateReady)
	if err != nil {
		return nil, 0, err
	}
	if err := nextResultSet(rows, "the lease's two picks"); err != nil {
		return nil, 0, err
	}
	sched, picked, err := s.scanPick(rows, store.StateScheduled)
	if err != nil {
		return nil, 0, err
	}
	return append(out, sched...), max(clock, picked), nil
}

// pickDue locks and reads the first max messages of topic in state st
// (ready or scheduled) due by now, with their queue rows, in one
// statement (leasePickWith for ready ones; the same join from
// q_scheduled in due order for scheduled ones). A message whose row no
// longer matches its queue row is left out. In TimeDB mode the pick reads
// the clock and answers it (0 when it picked nothing).
func (s *Store) pickDue(ctx context.Context, tx *conntx, st store.State, topic string, now int64, limit int) ([]*store.Record, int64, error) {
	q, args := s.pickDueSQL(st, topic, now, limit)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	return s.scanPick(rows, st)
}

// pickDueSQL is pickDue's statement and its arguments.
func (s *Store) pickDueSQL(st store.State, topic string, now int64, limit int) (string, []any) {
	nowCol, nowCond, args := "0", "?", []any{topic, now, limit}
	if !s.callerNow {
		n := s.nowSQL()
		nowCol, nowCond, args = n, n, []any{topic, limit}
	}
	q := s.leasePickWith(nowCol, nowCond)
	if st == store.StateScheduled {
		q = "SELECT STRAIGHT_JOIN " + prefixed("m.", msgCols) + ", q.due, q.seq, " + nowCol + " FROM " + s.t("q_scheduled") + " q FORCE INDEX (PRIMARY) JOIN " + s.t("message") + " m FORCE INDEX (PRIMARY) ON m.topic = q.topic AND m.id = q.id" + // #nosec G202 -- only table and column names (s.t: the prefix validated at Open) and the clock's expression (nowSQL, or a placeholder) are concatenated; values are parameters
			" WHERE q.topic = ? AND q.due <= " + nowCond + " ORDER BY q.due, q.seq LIMIT ? FOR UPDATE SKIP LOCKED"
	}
	return q, args
}

// scanPick reads a pick's rows (the current result set of rows) of
// messages in state st.
func (s *Store) scanPick(rows *sql.Rows, st store.State) ([]*store.Record, int64, error) {
	var out []*store.Record
	var clock int64
	for rows.Next() {
		var k qkey
		r, err := scanMsg(leaseScanner{rows, []any{&k.due, &k.seq, &clock}})
		if err != nil {
			return nil, 0, err
		}
		if r.State != st || r.Seq != k.seq {
			continue
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if s.callerNow {
		clock = 0
	}
	return out, clock, nil
}
