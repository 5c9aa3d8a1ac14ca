package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
)

// errTopicHolds carries the live count out of TopicDelete's transaction.
type errTopicHolds int64

func (e errTopicHolds) Error() string { return fmt.Sprintf("holds %d messages", int64(e)) }

// TopicDelete implements store.Store: the topic row (its settings) goes
// once topic_count says the topic holds no live message; tombstones and
// count rows stay, so dedup and DedupPurge go on. A send inserts the row
// again (delayq_send's INSERT … ON CONFLICT DO NOTHING), which revives the
// topic. A send whose transaction took the row's place before the delete
// and commits after it leaves messages in a topic without a row: reads
// put the row back (heal), so that topic is shown again.
func (s *Store) TopicDelete(ctx context.Context, topic string) (err error) {
	if err := s.check(); err != nil {
		return err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	var settings []byte
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT settings FROM "+s.fn("topic")+" WHERE name = $1 FOR UPDATE", topic).Scan(&settings); err != nil {
			return err
		}
		var live int64
		if err := tx.QueryRow(ctx, "SELECT coalesce(sum(scheduled + ready + inflight + dead), 0)::bigint FROM "+
			s.fn("topic_count")+" WHERE topic = $1", topic).Scan(&live); err != nil {
			return err
		}
		if live > 0 {
			return errTopicHolds(live)
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+s.fn("topic")+" WHERE name = $1", topic)
		return err
	})
	var holds errTopicHolds
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		live, err := s.liveCount(ctx, topic)
		if err != nil {
			return err
		}
		if live == 0 {
			return fmt.Errorf("pgstore: topic %q: %w", topic, store.ErrNotFound)
		}
		// Rowless but holding messages: shown, so not deletable.
		if err := s.heal(ctx, topic, nil); err != nil {
			return err
		}
		return fmt.Errorf("pgstore: topic %q holds messages: %w", topic, store.ErrConflict)
	case errors.As(err, &holds):
		return fmt.Errorf("pgstore: topic %q %v: %w", topic, holds, store.ErrConflict)
	case err != nil:
		return s.fail("delete topic", err)
	}
	s.notify(ctx, map[string]int64{topic: store.NotifySettings})
	// A send that committed meanwhile, its row insert made before ours.
	if live, err := s.liveCount(ctx, topic); err != nil || live == 0 {
		return err
	}
	if err := s.heal(ctx, topic, settings); err != nil {
		return err
	}
	return fmt.Errorf("pgstore: topic %q: a send arrived while it was being deleted: %w", topic, store.ErrConflict)
}

// liveCount is how many scheduled, ready, inflight and dead messages the
// committed counts give topic.
func (s *Store) liveCount(ctx context.Context, topic string) (int64, error) {
	var live int64
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(sum(scheduled + ready + inflight + dead), 0)::bigint FROM "+
		s.fn("topic_count")+" WHERE topic = $1", topic).Scan(&live); err != nil {
		return 0, s.fail("count topic", err)
	}
	return live, nil
}

// heal puts back the row of a topic that holds messages without one (see
// TopicDelete), with settings if given, keeping a row that exists.
func (s *Store) heal(ctx context.Context, topic string, settings []byte) error {
	var set any // NULL (never set) unless given: a nil []byte would be ''
	if settings != nil {
		set = settings
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO "+s.fn("topic")+" (name, settings) VALUES ($1, $2) ON CONFLICT DO NOTHING",
		topic, set); err != nil {
		return s.fail("heal topic", err)
	}
	return nil
}

// healRowless puts back the row of every topic that holds messages but
// has none, before TopicList reads the view (which lists rows).
func (s *Store) healRowless(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "INSERT INTO "+s.fn("topic")+" (name)"+
		" SELECT c.topic FROM "+s.fn("topic_count")+" c WHERE NOT EXISTS (SELECT 1 FROM "+s.fn("topic")+" t WHERE t.name = c.topic)"+
		" GROUP BY c.topic HAVING sum(c.scheduled + c.ready + c.inflight + c.dead) > 0 ON CONFLICT DO NOTHING"); err != nil {
		return s.fail("heal topics", err)
	}
	return nil
}
