package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

// The DeadList cursor is the (DeadAt, Seq) of the last record returned:
// a position, so removing returned records skips nothing.
func deadCursor(r *store.Record) string {
	return strconv.FormatInt(r.DeadAt, 10) + "." + strconv.FormatUint(r.Seq, 10)
}

func parseDeadCursor(c string) (int64, int64, error) {
	a, b, ok := strings.Cut(c, ".")
	if ok {
		deadAt, err1 := strconv.ParseInt(a, 10, 64)
		seq, err2 := strconv.ParseInt(b, 10, 64)
		if err1 == nil && err2 == nil {
			return deadAt, seq, nil
		}
	}
	return 0, 0, fmt.Errorf("pgstore: invalid dead-list cursor %q: %w", c, store.ErrBadCursor)
}

// DeadList implements store.Store.
func (s *Store) DeadList(ctx context.Context, p *store.DeadListParams) (_ []*store.Record, _ string, err error) {
	if err := s.check(); err != nil {
		return nil, "", err
	}
	after, afterSeq := int64(-1<<63), int64(-1<<63)
	if p.Cursor != "" {
		if after, afterSeq, err = parseDeadCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	if p.Limit <= 0 {
		return nil, "", nil
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	_, recs, err := s.recs(ctx, "list dead", "SELECT "+recColsOf("r")+" FROM "+s.fn("q_dead")+" q JOIN "+s.fn("message")+" m ON m.topic = q.topic AND m.id = q.id,"+
		" LATERAL "+s.fn("rec_msg")+"(m, 0) r WHERE q.topic = $1 AND (q.dead_at, q.seq) > ($2, $3) ORDER BY q.dead_at, q.seq LIMIT $4",
		p.Topic, after, afterSeq, p.Limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(recs) > p.Limit {
		recs = recs[:p.Limit]
		next = deadCursor(recs[len(recs)-1])
	}
	return recs, next, nil
}

// DeadReplay implements store.Store.
func (s *Store) DeadReplay(ctx context.Context, p *store.DeadReplayParams) (_ []*store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	sts, recs, err := s.recs(ctx, "replay dead", "SELECT "+recCols+" FROM "+s.fn("op_dead_replay")+"($1, $2, $3, $4)",
		s.nowArg(p.Now), p.Topic, nullIfEmpty(p.ID), p.Max)
	if err != nil {
		return nil, err
	}
	if p.ID != "" && len(sts) == 1 && sts[0] == statusNotFound {
		return nil, fmt.Errorf("pgstore: replay: message %q in topic %q is not dead: %w", p.ID, p.Topic, store.ErrNotFound)
	}
	if len(recs) > 0 {
		s.notify(ctx, map[string]int64{p.Topic: 0}) // replayed messages are ready now
	}
	return recs, nil
}

// DeadDelete implements store.Store.
func (s *Store) DeadDelete(ctx context.Context, p *store.DeadDeleteParams) (_ int, err error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	var n int32
	if err := s.pool.QueryRow(ctx, "SELECT "+s.fn("op_dead_delete")+"($1, $2, $3)", p.Topic, nullIfEmpty(p.ID), p.Max).Scan(&n); err != nil {
		return 0, s.fail("delete dead", err)
	}
	if p.ID != "" && n == 0 {
		return 0, fmt.Errorf("pgstore: delete: message %q in topic %q is not dead: %w", p.ID, p.Topic, store.ErrNotFound)
	}
	return int(n), nil
}

// DedupPurge implements store.Store. It also folds the counter rows that
// concurrent transactions added (see the package doc, "Counts").
func (s *Store) DedupPurge(ctx context.Context, p *store.DedupPurgeParams) (_ int, err error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	var n int32
	if err := s.pool.QueryRow(ctx, "SELECT "+s.fn("op_dedup_purge")+"($1, $2, $3)", s.nowArg(p.Now), p.Window, p.Max).Scan(&n); err != nil {
		return 0, s.fail("purge tombstones", err)
	}
	return int(n), nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
