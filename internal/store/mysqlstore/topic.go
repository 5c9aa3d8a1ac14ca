package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/delayq/delayq/internal/store"
)

func (s *Store) topicRec(ctx context.Context, tx *conntx, name string) (*store.TopicRecord, error) {
	t := &store.TopicRecord{Name: name}
	var deleted bool
	// The counts are the row's (written by servers before schema 5) plus
	// its stripes' (see flushCounts).
	err := tx.QueryRowContext(ctx, "SELECT t.settings, t.scheduled + COALESCE(SUM(c.scheduled), 0), t.ready + COALESCE(SUM(c.ready), 0), "+ // #nosec G202 -- only table names (s.t: the prefix validated at Open) are concatenated; values are parameters
		"t.inflight + COALESCE(SUM(c.inflight), 0), t.dead + COALESCE(SUM(c.dead), 0), t.acked + COALESCE(SUM(c.acked), 0), t.deleted "+
		"FROM "+s.t("topic")+" t LEFT JOIN "+s.t("topic_count")+" c ON c.topic = t.name WHERE t.name = ? GROUP BY t.name", name).
		Scan(&t.Settings, &t.Counts.Scheduled, &t.Counts.Ready, &t.Counts.Inflight, &t.Counts.Dead, &t.Counts.Acked, &deleted)
	if err == nil && deleted && t.Counts.Live() == 0 {
		err = sql.ErrNoRows // see TopicDelete
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("mysqlstore: topic %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	// Each MIN reads the first entry of a primary-key (or index) prefix.
	var a, b, c sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT (SELECT MIN(due) FROM "+s.t("q_scheduled")+" WHERE topic = ?), (SELECT MIN(due) FROM "+s.t("q_ready")+" WHERE topic = ?), (SELECT MIN(lease_until) FROM "+s.t("q_inflight")+" WHERE topic = ?)", name, name, name).Scan(&a, &b, &c); err != nil {
		return nil, err
	}
	t.NextDue, t.OldestReady, t.NextLeaseExpiry = a.Int64, b.Int64, c.Int64
	return t, nil
}

// TopicGet implements store.Store.
func (s *Store) TopicGet(ctx context.Context, topic string) (*store.TopicRecord, error) {
	var t *store.TopicRecord
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		var err error
		t, err = s.topicRec(ctx, tx, topic)
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// TopicList implements store.Store. It reads every topic in a fixed
// number of statements, whatever their number: each server lists topics
// every 5 s (its safety sweep), at each metrics scrape and GET
// /v1/topics, and reading each topic on its own (topicRec) made 2
// statements per topic per list.
func (s *Store) TopicList(ctx context.Context) ([]*store.TopicRecord, error) {
	var out []*store.TopicRecord
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		out = nil
		// A deleted topic that a send through the SQL procedure made again
		// (see TopicDelete) loses its mark here.
		if _, err := tx.ExecContext(ctx, "UPDATE "+s.t("topic")+" t SET t.deleted = 0 WHERE t.deleted = 1 AND t.scheduled + t.ready + t.inflight + t.dead + "+ // #nosec G202 -- only table names (s.t: the prefix validated at Open) are concatenated
			"(SELECT COALESCE(SUM(c.scheduled + c.ready + c.inflight + c.dead), 0) FROM "+s.t("topic_count")+" c WHERE c.topic = t.name) > 0"); err != nil {
			return err
		}
		// The counts as topicRec sums them, for every topic at once.
		rows, err := tx.QueryContext(ctx, "SELECT t.name, t.settings, t.scheduled + COALESCE(SUM(c.scheduled), 0), t.ready + COALESCE(SUM(c.ready), 0), "+ // #nosec G202 -- only table names (s.t: the prefix validated at Open) are concatenated; no values
			"t.inflight + COALESCE(SUM(c.inflight), 0), t.dead + COALESCE(SUM(c.dead), 0), t.acked + COALESCE(SUM(c.acked), 0), t.deleted "+
			"FROM "+s.t("topic")+" t LEFT JOIN "+s.t("topic_count")+" c ON c.topic = t.name GROUP BY t.name ORDER BY t.name")
		if err != nil {
			return err
		}
		byName := make(map[string]*store.TopicRecord)
		for rows.Next() {
			var name []byte
			var deleted bool
			t := &store.TopicRecord{}
			if err := rows.Scan(&name, &t.Settings, &t.Counts.Scheduled, &t.Counts.Ready, &t.Counts.Inflight, &t.Counts.Dead, &t.Counts.Acked, &deleted); err != nil {
				_ = rows.Close()
				return err
			}
			if deleted && t.Counts.Live() == 0 {
				continue // deleted (see TopicDelete)
			}
			t.Name = string(name)
			byName[t.Name] = t
			out = append(out, t)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// Each queue's first entry per topic: a loose scan of the topic's
		// prefix of its primary key (or index), one seek per topic.
		rows, err = tx.QueryContext(ctx, "SELECT 0, topic, MIN(due) FROM "+s.t("q_scheduled")+" GROUP BY topic"+ // #nosec G202 -- only table names (s.t: the prefix validated at Open) are concatenated; no values
			" UNION ALL SELECT 1, topic, MIN(due) FROM "+s.t("q_ready")+" GROUP BY topic"+
			" UNION ALL SELECT 2, topic, MIN(lease_until) FROM "+s.t("q_inflight")+" GROUP BY topic")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var which int
			var name []byte
			var first int64
			if err := rows.Scan(&which, &name, &first); err != nil {
				return err
			}
			t := byName[string(name)]
			switch {
			case t == nil: // a queue entry of a topic without its row: not listed, as before
			case which == 0:
				t.NextDue = first
			case which == 1:
				t.OldestReady = first
			default:
				t.NextLeaseExpiry = first
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TopicSettingsList implements store.TopicSettingsLister: the topic
// table's settings (a deleted topic's are NULL), without the counts and
// queue heads.
func (s *Store) TopicSettingsList(ctx context.Context) ([]*store.TopicRecord, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "SELECT name, settings FROM "+s.t("topic")+" WHERE settings IS NOT NULL ORDER BY name") // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; no values
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	var out []*store.TopicRecord
	for rows.Next() {
		var name, settings []byte
		if err := rows.Scan(&name, &settings); err != nil {
			return nil, s.wrap(err)
		}
		if settings == nil {
			settings = []byte{} // set, to nothing
		}
		out = append(out, &store.TopicRecord{Name: string(name), Settings: settings})
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(err)
	}
	return out, nil
}

var _ store.TopicSettingsLister = (*Store)(nil)

// TopicSettingsPut implements store.Store.
func (s *Store) TopicSettingsPut(ctx context.Context, topic string, settings []byte) error {
	if settings == nil {
		settings = []byte{}
	}
	return s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("topic")+" (name, settings) VALUES (?, ?) ON DUPLICATE KEY UPDATE settings = VALUES(settings), deleted = 0", topic, settings) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		return err
	})
}

// DueCounts counts the topic's scheduled messages due in each of n
// buckets of bucketMS from fromMS (the dashboard's Upcoming chart).
func (s *Store) DueCounts(ctx context.Context, topic string, fromMS, bucketMS int64, n int) ([]int64, error) {
	out := make([]int64, max(n, 0))
	if n <= 0 || bucketMS <= 0 {
		return out, nil
	}
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		clear(out)
		rows, err := tx.QueryContext(ctx, "SELECT (due - ?) DIV ?, COUNT(*) FROM "+s.t("q_scheduled")+ // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
			" WHERE topic = ? AND due >= ? AND due < ? + ? * ? GROUP BY 1", fromMS, bucketMS, topic, fromMS, fromMS, bucketMS, int64(n))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var b, c int64
			if err := rows.Scan(&b, &c); err != nil {
				return err
			}
			if b >= 0 && b < int64(n) {
				out[b] = c
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TopicDelete implements store.Store: under the locks of the topic row
// and of all its count stripes (a send holds one of them to its commit),
// the row is marked deleted and its settings cleared if it counts no live
// message. The row stays for its acked count; reads hide it (topicRec).
func (s *Store) TopicDelete(ctx context.Context, topic string) error {
	return s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		var live int64
		var deleted bool
		q := "SELECT scheduled + ready + inflight + dead, deleted FROM " + s.t("topic") + " WHERE name = ? FOR UPDATE" // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		err := tx.QueryRowContext(ctx, q, topic).Scan(&live, &deleted)
		if err == nil {
			// Every stripe, locked: a send in progress holds one (or has
			// inserted it), so the delete waits for it and then counts it.
			var striped int64
			q = "SELECT COALESCE(SUM(scheduled + ready + inflight + dead), 0) FROM " + s.t("topic_count") + " WHERE topic = ? FOR UPDATE" // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
			if err = tx.QueryRowContext(ctx, q, topic).Scan(&striped); err == nil {
				live += striped
			}
		}
		switch {
		case errors.Is(err, sql.ErrNoRows) || err == nil && deleted && live == 0:
			return fmt.Errorf("mysqlstore: topic %q: %w", topic, store.ErrNotFound)
		case err != nil:
			return err
		case live > 0:
			return fmt.Errorf("mysqlstore: topic %q holds %d messages: %w", topic, live, store.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, "UPDATE "+s.t("topic")+" SET settings = NULL, deleted = 1 WHERE name = ?", topic) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		return err
	})
}
