package pgstore

import (
	"context"
	"math"

	"github.com/delayq/delayq/internal/store"
)

// listIndex is the queue table and order column of each listable state.
var listIndex = map[store.State][2]string{
	store.StateScheduled: {"q_scheduled", "due_at"},
	store.StateReady:     {"q_ready", "due_at"},
	store.StateInflight:  {"q_inflight", "lease_until"},
	store.StateDead:      {"q_dead", "dead_at"},
}

// MessageList implements store.Store: a range read of the state's queue
// table (its primary key, q_ready_lease for ready, or q_inflight_topic),
// joined to the records.
func (s *Store) MessageList(ctx context.Context, p *store.MessageListParams) (_ []*store.Record, _ string, err error) {
	if err := s.check(); err != nil {
		return nil, "", err
	}
	key, seq, prio := int64(math.MinInt64), int64(math.MinInt64), int16(-1)
	if p.Cursor != "" {
		pos, err := store.ParseListCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		key, seq = pos.Key, int64(pos.Seq) // #nosec G115 -- Seq values come from a bigint sequence
		prio = int16(pos.Priority)
	}
	ix, ok := listIndex[p.State]
	if !ok || p.Limit <= 0 {
		return nil, "", nil
	}
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if ix[1] == "due_at" {
		from, to = p.DueFrom, p.DueTo
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	col := "q." + ix[1]
	order, after, args := col+", q.seq", "($2, $3)", []any{p.Topic, key, seq, from, to, p.Limit + 1}
	if p.State == store.StateReady {
		// Lease order, on q_ready_lease; the due range is applied within
		// each priority (a filter on that index's range).
		order, after, args = "q.priority, "+order, "($7, $2, $3)", append(args, prio)
	}
	_, recs, err := s.recs(ctx, "list messages", "SELECT "+recColsOf("r")+" FROM "+s.fn(ix[0])+" q JOIN "+s.fn("message")+" m ON m.topic = q.topic AND m.id = q.id,"+
		" LATERAL "+s.fn("rec_msg")+"(m, 0) r WHERE q.topic = $1 AND ("+order+") > "+after+
		" AND "+col+" >= $4 AND "+col+" < $5 ORDER BY "+order+" LIMIT $6", args...)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(recs) > p.Limit {
		recs = recs[:p.Limit]
		next = store.ListCursor(recs[len(recs)-1])
	}
	return recs, next, nil
}
