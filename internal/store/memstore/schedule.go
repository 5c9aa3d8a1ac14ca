package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

func cloneSchedule(s *store.Schedule) *store.Schedule {
	c := *s
	c.Spec = append([]byte{}, s.Spec...)
	return &c
}

func scheduleNotFound(name string) error {
	return fmt.Errorf("memstore: schedule %q: %w", name, store.ErrNotFound)
}

// ScheduleUpsert implements store.Store.
func (s *Store) ScheduleUpsert(_ context.Context, p *store.ScheduleUpsertParams) (*store.Schedule, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	sc := s.schedules[p.Name]
	if sc == nil {
		sc = &store.Schedule{Name: p.Name, CreatedAt: p.Now, LastTick: p.LastTick}
		s.schedules[p.Name] = sc
	}
	sc.Spec = append([]byte{}, p.Spec...)
	sc.LastTick = max(sc.LastTick, p.LastTick)
	sc.UpdatedAt = p.Now
	return cloneSchedule(sc), nil
}

// ScheduleGet implements store.Store.
func (s *Store) ScheduleGet(_ context.Context, name string) (*store.Schedule, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	sc := s.schedules[name]
	if sc == nil {
		return nil, scheduleNotFound(name)
	}
	return cloneSchedule(sc), nil
}

// ScheduleList implements store.Store.
func (s *Store) ScheduleList(context.Context) ([]*store.Schedule, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]*store.Schedule, 0, len(s.schedules))
	for _, sc := range s.schedules {
		out = append(out, cloneSchedule(sc))
	}
	slices.SortFunc(out, func(a, b *store.Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ScheduleDelete implements store.Store.
func (s *Store) ScheduleDelete(_ context.Context, name string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.schedules[name] == nil {
		return scheduleNotFound(name)
	}
	delete(s.schedules, name)
	return nil
}

// ScheduleTick implements store.Store.
func (s *Store) ScheduleTick(_ context.Context, p *store.ScheduleTickParams) (*store.Schedule, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	sc := s.schedules[p.Name]
	if sc == nil {
		return nil, scheduleNotFound(p.Name)
	}
	sc.LastTick = max(sc.LastTick, p.Tick)
	return cloneSchedule(sc), nil
}
