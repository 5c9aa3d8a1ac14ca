package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
)

const topicCols = "name, settings IS NOT NULL, settings, scheduled, ready, inflight, dead, acked, next_due, oldest_ready, next_lease_expiry"

func scanTopic(row pgx.Row) (*store.TopicRecord, error) {
	var tr store.TopicRecord
	var hasSettings bool
	c := &tr.Counts
	if err := row.Scan(&tr.Name, &hasSettings, &tr.Settings, &c.Scheduled, &c.Ready, &c.Inflight, &c.Dead, &c.Acked,
		&tr.NextDue, &tr.OldestReady, &tr.NextLeaseExpiry); err != nil {
		return nil, err
	}
	switch {
	case !hasSettings:
		tr.Settings = nil
	case tr.Settings == nil:
		tr.Settings = []byte{} // set, to nothing: not "never set"
	}
	return &tr, nil
}

// TopicGet implements store.Store.
func (s *Store) TopicGet(ctx context.Context, topic string) (_ *store.TopicRecord, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	tr, err := scanTopic(s.pool.QueryRow(ctx, "SELECT "+topicCols+" FROM "+s.fn("topic_info")+" WHERE name = $1", topic))
	if err == pgx.ErrNoRows {
		// Rowless topics holding messages (see TopicDelete) are healed.
		live, lerr := s.liveCount(ctx, topic)
		if lerr != nil {
			return nil, lerr
		}
		if live == 0 {
			return nil, fmt.Errorf("pgstore: topic %q: %w", topic, store.ErrNotFound)
		}
		if herr := s.heal(ctx, topic, nil); herr != nil {
			return nil, herr
		}
		tr, err = scanTopic(s.pool.QueryRow(ctx, "SELECT "+topicCols+" FROM "+s.fn("topic_info")+" WHERE name = $1", topic))
	}
	if err != nil {
		return nil, s.fail("get topic", err)
	}
	return tr, nil
}

// countFoldAfter is how many count rows a topic may have before a fold
// takes them: more than the stripes concurrent leases and acks make.
const countFoldAfter = 256

// countFoldBatch rows per topic at most are folded in one transaction
// (≈ 0.1–0.2 s on a loaded 2-core machine), for at most countFoldFor per
// fold, well inside a call's bound.
const (
	countFoldBatch = 5000
	countFoldFor   = 500 * time.Millisecond
)

// countFoldEvery is how often a subscribed store (a server) folds, and
// how recent a fold makes a topic list's own unnecessary. Every send
// inserts a count row (schema 8), so at 1,000 sends/s a topic gains 1,000
// rows a second; folded each second they stay a few milliseconds of work
// on one connection. Folded only by the topic lists of the safety sweep
// and the push and delivery watches (every 5 s, the three at once), a
// fold took 5,000 rows, and the three calls sorted and tried to lock them
// all at the same instant: 16–35 ms each, both cores of a 2-core database
// busy, and the sends, leases and acks of that moment waiting.
const countFoldEvery = time.Second

// foldCounts folds the count rows of the topics that have more than
// countFoldAfter, in batches of countFoldBatch for at most countFoldFor;
// what is left waits for the next fold. One fold runs per store at a
// time: a caller that finds one running, or one that ended within
// countFoldEvery, returns at once (a topic read sums every row, so
// counts are exact either way; folding keeps that sum short).
func (s *Store) foldCounts(ctx context.Context) error {
	if !s.foldMu.TryLock() {
		return nil
	}
	defer s.foldMu.Unlock()
	if time.Since(s.foldedAt) < countFoldEvery {
		return nil
	}
	for start := time.Now(); time.Since(start) < countFoldFor; {
		var n int
		if err := s.pool.QueryRow(ctx, "SELECT "+s.fn("count_fold")+"($1, $2)", countFoldAfter, countFoldBatch).Scan(&n); err != nil {
			return s.fail("fold counts", err)
		}
		if n < countFoldBatch/2 {
			break
		}
	}
	s.foldedAt = time.Now()
	return nil
}

// TopicList implements store.Store.
func (s *Store) TopicList(ctx context.Context) (_ []*store.TopicRecord, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	if err := s.healRowless(ctx); err != nil {
		return nil, err
	}
	// Every send inserts a count row of its own (schema 8), which every
	// count read sums: fold them first unless this store just did.
	if err := s.foldCounts(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+topicCols+" FROM "+s.fn("topic_info")+" ORDER BY name")
	if err != nil {
		return nil, s.fail("list topics", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.TopicRecord, error) { return scanTopic(row) })
	if err != nil {
		return nil, s.fail("list topics", err)
	}
	return out, nil
}

// TopicSettingsList implements store.TopicSettingsLister: the topic
// table's settings, without topic_info's counts and queue heads.
func (s *Store) TopicSettingsList(ctx context.Context) (_ []*store.TopicRecord, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	rows, err := s.pool.Query(ctx, "SELECT name, settings FROM "+s.fn("topic")+" WHERE settings IS NOT NULL ORDER BY name")
	if err != nil {
		return nil, s.fail("list topic settings", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.TopicRecord, error) {
		tr := &store.TopicRecord{}
		if err := row.Scan(&tr.Name, &tr.Settings); err != nil {
			return nil, err
		}
		if tr.Settings == nil {
			tr.Settings = []byte{} // set, to nothing
		}
		return tr, nil
	})
	if err != nil {
		return nil, s.fail("list topic settings", err)
	}
	return out, nil
}

// TopicSettingsPut implements store.Store.
func (s *Store) TopicSettingsPut(ctx context.Context, topic string, settings []byte) (err error) {
	if err := s.check(); err != nil {
		return err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	if settings == nil {
		settings = []byte{} // NULL means never set
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO "+s.fn("topic")+" (name, settings) VALUES ($1, $2)"+
		" ON CONFLICT (name) DO UPDATE SET settings = EXCLUDED.settings", topic, settings); err != nil {
		return s.fail("put topic settings", err)
	}
	s.notify(ctx, map[string]int64{topic: store.NotifySettings})
	return nil
}

// DueCounts counts the topic's scheduled messages due in each of n
// buckets of bucketMS from fromMS (the dashboard's Upcoming chart).
func (s *Store) DueCounts(ctx context.Context, topic string, fromMS, bucketMS int64, n int) (_ []int64, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]int64, n)
	if n <= 0 || bucketMS <= 0 {
		return out, nil
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	rows, err := s.pool.Query(ctx, "SELECT (q.due_at - $2) / $3, count(*) FROM "+s.fn("q_scheduled")+" q"+
		" WHERE q.topic = $1 AND q.due_at >= $2 AND q.due_at < $2 + $3 * $4 GROUP BY 1", topic, fromMS, bucketMS, int64(n))
	if err != nil {
		return nil, s.fail("count due", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b, c int64
		if err := rows.Scan(&b, &c); err != nil {
			return nil, s.fail("count due", err)
		}
		if b >= 0 && b < int64(n) {
			out[b] = c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("count due", err)
	}
	return out, nil
}
