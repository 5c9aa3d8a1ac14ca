package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
)

const scheduleCols = "name, spec, last_tick, created_at, updated_at"

func scanSchedule(row pgx.Row) (*store.Schedule, error) {
	var sc store.Schedule
	if err := row.Scan(&sc.Name, &sc.Spec, &sc.LastTick, &sc.CreatedAt, &sc.UpdatedAt); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (s *Store) scheduleErr(op, name string, err error) error {
	if err == pgx.ErrNoRows {
		return fmt.Errorf("pgstore: schedule %q: %w", name, store.ErrNotFound)
	}
	return s.fail(op, err)
}

// ScheduleUpsert implements store.Store.
func (s *Store) ScheduleUpsert(ctx context.Context, p *store.ScheduleUpsertParams) (_ *store.Schedule, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	spec := p.Spec
	if spec == nil {
		spec = []byte{}
	}
	sc, err := scanSchedule(s.pool.QueryRow(ctx, "INSERT INTO "+s.fn("schedule")+" AS x (name, spec, last_tick, created_at, updated_at)"+
		" SELECT $2, $3, $4, c.n, c.n FROM (SELECT coalesce($1::bigint, "+s.fn("now_ms")+"()) AS n) c"+
		" ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, last_tick = greatest(x.last_tick, EXCLUDED.last_tick), updated_at = EXCLUDED.updated_at"+
		" RETURNING "+scheduleCols, s.nowArg(p.Now), p.Name, spec, p.LastTick))
	if err != nil {
		return nil, s.fail("upsert schedule", err)
	}
	return sc, nil
}

// ScheduleGet implements store.Store.
func (s *Store) ScheduleGet(ctx context.Context, name string) (_ *store.Schedule, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	sc, err := scanSchedule(s.pool.QueryRow(ctx, "SELECT "+scheduleCols+" FROM "+s.fn("schedule")+" WHERE name = $1", name))
	if err != nil {
		return nil, s.scheduleErr("get schedule", name, err)
	}
	return sc, nil
}

// ScheduleList implements store.Store.
func (s *Store) ScheduleList(ctx context.Context) (_ []*store.Schedule, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	rows, err := s.pool.Query(ctx, "SELECT "+scheduleCols+" FROM "+s.fn("schedule")+" ORDER BY name")
	if err != nil {
		return nil, s.fail("list schedules", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Schedule, error) { return scanSchedule(row) })
	if err != nil {
		return nil, s.fail("list schedules", err)
	}
	return out, nil
}

// ScheduleDelete implements store.Store.
func (s *Store) ScheduleDelete(ctx context.Context, name string) (err error) {
	if err := s.check(); err != nil {
		return err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	tag, err := s.pool.Exec(ctx, "DELETE FROM "+s.fn("schedule")+" WHERE name = $1", name)
	if err != nil {
		return s.fail("delete schedule", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: schedule %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// ScheduleTick implements store.Store.
func (s *Store) ScheduleTick(ctx context.Context, p *store.ScheduleTickParams) (_ *store.Schedule, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	sc, err := scanSchedule(s.pool.QueryRow(ctx, "UPDATE "+s.fn("schedule")+" SET last_tick = greatest(last_tick, $2) WHERE name = $1 RETURNING "+scheduleCols,
		p.Name, p.Tick))
	if err != nil {
		return nil, s.scheduleErr("tick schedule", p.Name, err)
	}
	return sc, nil
}
