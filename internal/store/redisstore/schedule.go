package redisstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// Schedules live in one slot, tagged {#sched} ('#' is in no topic name, so
// no topic key shares the tag):
//
//	dq:{#sched}:names     SET   every schedule name
//	dq:{#sched}:s:<name>  HASH  spec (the engine's blob), last (LastTick),
//	                            cat (CreatedAt), uat (UpdatedAt)
//
// Each write is one script over both keys, so the registry and the hashes
// never disagree, and LastTick only moves forward even when servers race.
func (ks keyspace) scheduleNames() string { return ks.prefix + ":{#sched}:names" }

func (ks keyspace) schedulePrefix() string { return ks.prefix + ":{#sched}:s:" }

// scheduleUpsertScript creates or replaces a schedule.
//
//	KEYS[1] names SET; ARGV[1] now, ARGV[2] hash prefix, ARGV[3] name,
//	ARGV[4] spec, ARGV[5] LastTick
//
// Returns {now, last, cat, uat}.
var scheduleUpsertScript = libScript("scheduleUpsert", flagsGrow, `
local k = MPFX .. ARGV[3]
local last = tonumber(redis.call('HGET', k, 'last') or ARGV[5])
local cat = redis.call('HGET', k, 'cat') or NOW_S
if tonumber(ARGV[5]) > last then last = tonumber(ARGV[5]) end
redis.call('HSET', k, 'spec', ARGV[4], 'last', istr(last), 'cat', cat, 'uat', NOW_S)
redis.call('SADD', KEYS[1], ARGV[3])
return {NOW, istr(last), cat, NOW_S}
`)

// scheduleTickScript raises LastTick.
//
//	KEYS[1] names SET; ARGV[1] now, ARGV[2] hash prefix, ARGV[3] name,
//	ARGV[4] tick
//
// Returns {now, found (0/1)}.
var scheduleTickScript = libScript("scheduleTick", flagsState, `
local k = MPFX .. ARGV[3]
local last = redis.call('HGET', k, 'last')
if not last then return {NOW, 0} end
if tonumber(ARGV[4]) > tonumber(last) then redis.call('HSET', k, 'last', ARGV[4]) end
return {NOW, 1}
`)

// scheduleDeleteScript removes a schedule.
//
//	KEYS[1] names SET; ARGV[1] now, ARGV[2] hash prefix, ARGV[3] name
//
// Returns {now, deleted (0/1)}.
var scheduleDeleteScript = libScript("scheduleDelete", flagsState, `
redis.call('SREM', KEYS[1], ARGV[3])
return {NOW, redis.call('DEL', MPFX .. ARGV[3])}
`)

func (s *Store) scheduleCall(sc *script, now int64, args ...any) call {
	return call{sc: sc, keys: []string{s.keys.scheduleNames()},
		args: append([]any{s.nowArg(now), s.keys.schedulePrefix()}, args...)}
}

func checkScheduleName(name string) error {
	if !validName(name, isTopicByte, maxNameLen) {
		return fmt.Errorf("redisstore: invalid schedule name %q", name)
	}
	return nil
}

func scheduleNotFound(name string) error {
	return fmt.Errorf("redisstore: schedule %q: %w", name, store.ErrNotFound)
}

// ScheduleUpsert implements store.Store.
func (s *Store) ScheduleUpsert(ctx context.Context, p *store.ScheduleUpsertParams) (*store.Schedule, error) {
	if err := checkScheduleName(p.Name); err != nil {
		return nil, err
	}
	cmds, err := s.run(ctx, "upsert schedule", []call{s.scheduleCall(scheduleUpsertScript, p.Now, p.Name, p.Spec, p.LastTick)}, nil)
	if err != nil {
		return nil, err
	}
	a := asSlice(cmds[0].Val())
	if len(a) != 4 {
		return nil, errReply("upsert schedule", cmds[0].Val())
	}
	return &store.Schedule{Name: p.Name, Spec: append([]byte{}, p.Spec...), LastTick: asInt(a[1]), CreatedAt: asInt(a[2]), UpdatedAt: asInt(a[3])}, nil
}

// ScheduleTick implements store.Store.
func (s *Store) ScheduleTick(ctx context.Context, p *store.ScheduleTickParams) (*store.Schedule, error) {
	if err := checkScheduleName(p.Name); err != nil {
		return nil, err
	}
	cmds, err := s.run(ctx, "tick schedule", []call{s.scheduleCall(scheduleTickScript, 0, p.Name, p.Tick)}, nil)
	if err != nil {
		return nil, err
	}
	if a := asSlice(cmds[0].Val()); len(a) != 2 || asInt(a[1]) == 0 {
		return nil, scheduleNotFound(p.Name)
	}
	return s.ScheduleGet(ctx, p.Name)
}

// ScheduleDelete implements store.Store.
func (s *Store) ScheduleDelete(ctx context.Context, name string) error {
	if err := checkScheduleName(name); err != nil {
		return err
	}
	cmds, err := s.run(ctx, "delete schedule", []call{s.scheduleCall(scheduleDeleteScript, 0, name)}, nil)
	if err != nil {
		return err
	}
	if a := asSlice(cmds[0].Val()); len(a) != 2 || asInt(a[1]) == 0 {
		return scheduleNotFound(name)
	}
	return nil
}

// ScheduleGet implements store.Store.
func (s *Store) ScheduleGet(ctx context.Context, name string) (*store.Schedule, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := checkScheduleName(name); err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, s.keys.schedulePrefix()+name).Result()
	if err != nil {
		return nil, s.fail("get schedule", err)
	}
	if len(m) == 0 {
		return nil, scheduleNotFound(name)
	}
	return scheduleFromHash(name, m), nil
}

// ScheduleList implements store.Store: the registry, then every hash in
// one pipeline (one slot).
func (s *Store) ScheduleList(ctx context.Context) ([]*store.Schedule, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	names, err := s.rdb.SMembers(ctx, s.keys.scheduleNames()).Result()
	if err != nil {
		return nil, s.fail("list schedules", err)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.HGetAll(ctx, s.keys.schedulePrefix()+n)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, s.fail("list schedules", err)
	}
	out := make([]*store.Schedule, 0, len(names))
	for i, n := range names {
		if m := cmds[i].Val(); len(m) > 0 {
			out = append(out, scheduleFromHash(n, m))
		}
	}
	return out, nil
}

func scheduleFromHash(name string, m map[string]string) *store.Schedule {
	return &store.Schedule{
		Name: name, Spec: []byte(m["spec"]),
		LastTick: parseInt(m["last"]), CreatedAt: parseInt(m["cat"]), UpdatedAt: parseInt(m["uat"]),
	}
}
