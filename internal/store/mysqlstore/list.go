package mysqlstore

import (
	"context"
	"math"
	"strconv"

	"github.com/delayq/delayq/internal/store"
)

// listIndex is the queue table and order column of each listable state.
var listIndex = map[store.State][2]string{
	store.StateScheduled: {"q_scheduled", "due"},
	store.StateReady:     {"q_ready", "due"},
	store.StateInflight:  {"q_inflight", "lease_until"},
	store.StateDead:      {"q_dead", "dead_at"},
}

// MessageList implements store.Store: a range read of the state's queue
// table (its primary key, or topic_lease for inflight), then each
// record.
func (s *Store) MessageList(ctx context.Context, p *store.MessageListParams) ([]*store.Record, string, error) {
	var pos store.ListPosition
	cur := p.Cursor != ""
	if cur {
		var err error
		if pos, err = store.ParseListCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	ix, ok := listIndex[p.State]
	if !ok || p.Limit <= 0 {
		return nil, "", nil
	}
	tbl, col := ix[0], ix[1]
	ready := p.State == store.StateReady
	order, sel := col+", seq", col+", seq, id, topic"
	if ready {
		// Lease order; the due range is applied within each priority.
		order, sel = "priority, "+order, sel+", priority"
	}
	q := "SELECT " + sel + " FROM " + s.t(tbl) + " WHERE topic = ?" // #nosec G202 -- only a table and column names from listIndex are concatenated; values are parameters
	args := []any{p.Topic}
	if cur && ready {
		q += " AND (priority, due, seq) > (?, ?, ?)"
		args = append(args, pos.Priority, pos.Key, pos.Seq)
	} else if cur {
		q += " AND (" + col + ", seq) > (?, ?)"
		args = append(args, pos.Key, pos.Seq)
	}
	if col == "due" {
		if p.DueFrom != math.MinInt64 {
			q += " AND due >= ?"
			args = append(args, p.DueFrom)
		}
		if p.DueTo != math.MaxInt64 {
			q += " AND due < ?"
			args = append(args, p.DueTo)
		}
	}
	q += " ORDER BY " + order + " LIMIT ?"
	args = append(args, p.Limit+1)
	var out []*store.Record
	next := ""
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		out, next = nil, ""
		keys, err := s.pick(ctx, tx, q, args...)
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
			if r != nil && r.State == p.State {
				out = append(out, r)
			}
		}
		if more && len(keys) > 0 {
			last := keys[len(keys)-1] // a position, even if its record went
			next = strconv.FormatInt(last.due, 10) + "." + strconv.FormatUint(last.seq, 10)
			if ready && last.prio != 0 {
				next += "." + strconv.FormatUint(uint64(last.prio), 10)
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}
