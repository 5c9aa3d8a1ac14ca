package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/delayq/delayq/internal/store"
)

func (s *Store) getSchedule(ctx context.Context, q querier, name string) (*store.Schedule, error) {
	sc := &store.Schedule{Name: name}
	err := q.QueryRowContext(ctx, "SELECT spec, last_tick, created, updated FROM "+s.t("schedule")+" WHERE name = ?", name).Scan(&sc.Spec, &sc.LastTick, &sc.CreatedAt, &sc.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("mysqlstore: schedule %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// ScheduleUpsert implements store.Store.
func (s *Store) ScheduleUpsert(ctx context.Context, p *store.ScheduleUpsertParams) (*store.Schedule, error) {
	var sc *store.Schedule
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		spec := p.Spec
		if spec == nil {
			spec = []byte{}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("schedule")+" (name, spec, last_tick, created, updated) VALUES (?, ?, ?, ?, ?) "+ // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
			"ON DUPLICATE KEY UPDATE spec = VALUES(spec), last_tick = GREATEST(last_tick, VALUES(last_tick)), updated = VALUES(updated)",
			p.Name, spec, p.LastTick, now, now); err != nil {
			return err
		}
		var err error
		sc, err = s.getSchedule(ctx, tx, p.Name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// ScheduleGet implements store.Store.
func (s *Store) ScheduleGet(ctx context.Context, name string) (*store.Schedule, error) {
	var sc *store.Schedule
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		var err error
		sc, err = s.getSchedule(ctx, tx, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// ScheduleList implements store.Store.
func (s *Store) ScheduleList(ctx context.Context) ([]*store.Schedule, error) {
	var out []*store.Schedule
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		out = nil
		rows, err := tx.QueryContext(ctx, "SELECT name, spec, last_tick, created, updated FROM "+s.t("schedule")+" ORDER BY name") // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			sc := &store.Schedule{}
			var n []byte
			if err := rows.Scan(&n, &sc.Spec, &sc.LastTick, &sc.CreatedAt, &sc.UpdatedAt); err != nil {
				return err
			}
			sc.Name = string(n)
			out = append(out, sc)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScheduleDelete implements store.Store.
func (s *Store) ScheduleDelete(ctx context.Context, name string) error {
	return s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM "+s.t("schedule")+" WHERE name = ?", name) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("mysqlstore: schedule %q: %w", name, store.ErrNotFound)
		}
		return nil
	})
}

// ScheduleTick implements store.Store.
func (s *Store) ScheduleTick(ctx context.Context, p *store.ScheduleTickParams) (*store.Schedule, error) {
	var sc *store.Schedule
	err := s.txn(ctx, 0, func(tx *conntx, _ int64) error {
		res, err := tx.ExecContext(ctx, "UPDATE "+s.t("schedule")+" SET last_tick = GREATEST(last_tick, ?) WHERE name = ?", p.Tick, p.Name) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("mysqlstore: schedule %q: %w", p.Name, store.ErrNotFound)
		}
		sc, err = s.getSchedule(ctx, tx, p.Name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sc, nil
}
