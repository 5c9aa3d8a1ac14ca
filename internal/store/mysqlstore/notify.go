package mysqlstore

import (
	"context"
	"database/sql"
	"time"
)

// Subscribe implements store.Notifier. MySQL has no NOTIFY: every change
// that makes a message scheduled or ready bumps its topic's ver (in the
// same transaction as the change), and each server polls the topics' ver
// every PollInterval with one query. A change committed on another server
// is seen within PollInterval plus one query's time; for each topic whose
// ver moved, fn gets 0 when messages are ready, and the earliest scheduled
// due time otherwise.
func (s *Store) Subscribe(ctx context.Context, subscribed func(), fn func(topic string, dueAt int64)) error {
	seen := map[string]int64{}
	first := true
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		changed, err := s.pollVers(ctx, seen, first)
		if err != nil {
			if ctx.Err() != nil || s.closed.Load() {
				return nil
			}
			return s.wrap(err)
		}
		if first {
			first = false
			if subscribed != nil {
				subscribed()
			}
		}
		for _, c := range changed {
			fn(c.topic, c.due)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.done:
			return nil
		case <-tick.C:
		}
	}
}

type change struct {
	topic string
	due   int64
}

func (s *Store) pollVers(ctx context.Context, seen map[string]int64, first bool) ([]change, error) {
	qctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// Idle, this one query is all a poll costs: the topic table is small
	// (one row per topic) and its count rows (at most 64 numbered stripes,
	// plus the send procedure's own rows since the last fold: about
	// foldAfter) are read in their primary key's order. A topic's ver is
	// its row's (servers before schema 5) plus its count rows'. It also
	// counts those rows, so that a topic with many is folded (foldCounts).
	rows, err := s.db.QueryContext(qctx, "SELECT t.name, t.ver + COALESCE(SUM(c.ver), 0), COUNT(c.topic) FROM "+s.t("topic")+" t LEFT JOIN "+s.t("topic_count")+" c ON c.topic = t.name GROUP BY t.name") // #nosec G202 -- only table names (s.t: the prefix validated at Open) are concatenated
	if err != nil {
		return nil, err
	}
	var moved, fold []string
	for rows.Next() {
		var name []byte
		var ver, stripes int64
		if err := rows.Scan(&name, &ver, &stripes); err != nil {
			_ = rows.Close()
			return nil, err
		}
		n := string(name)
		if stripes > countStripes+foldAfter {
			fold = append(fold, n)
		}
		old, ok := seen[n]
		seen[n] = ver
		if !first && (!ok || old != ver) {
			moved = append(moved, n)
		}
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, n := range fold {
		// Another server folding at once takes other rows (SKIP LOCKED);
		// a failure leaves the rows to the next poll.
		if _, err := s.foldCounts(ctx, n); err != nil && ctx.Err() == nil && !s.closed.Load() {
			s.log.Warn("mysqlstore: fold count rows", "topic", n, "err", err)
		}
	}
	var out []change
	for _, n := range moved {
		// Whether anything is ready is the first entry of the topic's
		// prefix of q_ready's primary key (FORCE INDEX: the optimizer
		// would take the smaller key due_order, whose records a purge
		// has not removed yet each cost a look at their row).
		var ready, sched sql.NullInt64
		if err := s.db.QueryRowContext(qctx, "SELECT (SELECT 1 FROM "+s.t("q_ready")+" FORCE INDEX (PRIMARY) WHERE topic = ? LIMIT 1), (SELECT MIN(due) FROM "+s.t("q_scheduled")+" WHERE topic = ?)", n, n).Scan(&ready, &sched); err != nil {
			return nil, err
		}
		switch {
		case ready.Valid:
			out = append(out, change{n, 0})
		case sched.Valid:
			out = append(out, change{n, sched.Int64})
		}
	}
	return out, nil
}
