package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// infoScript reads a partition's counts and head times without scanning:
// ZCARD of each index (O(1)) and the first entry of three of them; for
// ready, of each priority's index (the oldest ready is the least head).
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//
// Returns {now, scheduled, ready, inflight, dead, acked, next due,
// oldest ready due, next lease expiry} with "" for an empty index.
//
// Counts are the cardinalities of the indexes every state change moves a
// message between inside its script, so they cannot drift from the data
// (a separate HINCRBY counter could, after a partial failure).
var infoScript = libScript("info", flagsRead, `
local out = {NOW}
local pris = readyPrios()
for i = 1, 5 do out[#out+1] = redis.call('ZCARD', IDX[i]) end
for j = 2, #pris do out[3] = out[3] + redis.call('ZCARD', rkey(pris[j])) end
local function head(k)
  local h = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  return h[2]
end
out[#out+1] = head(IDX[1]) or ''
local oldest
for _, pri in ipairs(pris) do
  local h = head(rkey(pri))
  if h and (not oldest or tonumber(h) < tonumber(oldest)) then oldest = h end
end
out[#out+1] = oldest or ''
out[#out+1] = head(IDX[3]) or ''
return out
`)

// TopicGet implements store.Store: one pipeline of the topic's meta hash
// and one info script per partition; cost O(partitions).
func (s *Store) TopicGet(ctx context.Context, topic string) (_ *store.TopicRecord, err error) {
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 1)
	defer end(&err)
	recs, err := s.topicRecords(ctx, []string{topic})
	if err != nil {
		return nil, err
	}
	if recs[0] == nil {
		return nil, fmt.Errorf("redisstore: topic %q: %w", topic, store.ErrNotFound)
	}
	return recs[0], nil
}

// TopicList implements store.Store: the registry, then every topic's
// record in one pipeline. The second round trip is O(topics ×
// partitions) long, so the call is bounded by one Timeout per round trip.
func (s *Store) TopicList(ctx context.Context) (_ []*store.TopicRecord, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 2)
	defer end(&err)
	names, err := s.topicNames(ctx, "list topics")
	if err != nil {
		return nil, err
	}
	recs, err := s.topicRecords(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make([]*store.TopicRecord, 0, len(recs))
	for _, r := range recs {
		// A registered topic without meta: its first insert failed after
		// registering. It never had a message or settings.
		if r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// topicNames reads the topic registry, sorted; op names the call in
// errors. A name that is not a valid topic is corruption.
func (s *Store) topicNames(ctx context.Context, op string) ([]string, error) {
	names, err := s.rdb.SMembers(ctx, s.keys.topics()).Result()
	if err != nil {
		return nil, s.fail(op, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if !validTopic(n) {
			return nil, fmt.Errorf("redisstore: %s: registry holds invalid name %q: %w", op, n, store.ErrCorrupt)
		}
	}
	return names, nil
}

// TopicSettingsList implements store.TopicSettingsLister: the registry,
// then each topic's meta hash, pipelined (no script per partition).
func (s *Store) TopicSettingsList(ctx context.Context) (_ []*store.TopicRecord, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 2)
	defer end(&err)
	names, err := s.topicNames(ctx, "list topic settings")
	if err != nil {
		return nil, err
	}
	settings := make([]*redis.StringCmd, len(names))
	if _, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, n := range names {
			settings[i] = pipe.HGet(ctx, s.keys.meta(n), "settings")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.fail("list topic settings", err)
	}
	var out []*store.TopicRecord
	for i, n := range names {
		set, err := settings[i].Bytes()
		if errors.Is(err, redis.Nil) {
			continue // never set, or deleted with its meta
		}
		if err != nil {
			return nil, s.fail("list topic settings", err)
		}
		if set == nil {
			set = []byte{} // set, to nothing
		}
		out = append(out, &store.TopicRecord{Name: n, Settings: set})
	}
	return out, nil
}

var _ store.TopicSettingsLister = (*Store)(nil)

// topicRecords reads the records of topics (nil for an unknown one).
func (s *Store) topicRecords(ctx context.Context, topics []string) ([]*store.TopicRecord, error) {
	var calls []call
	for _, t := range topics {
		for _, k := range s.keys.allParts(t) {
			calls = append(calls, s.partCall(infoScript, k, ""))
		}
	}
	metas := make([]*redis.MapStringStringCmd, len(topics))
	cmds, err := s.run(ctx, "topic", calls, func(pipe redis.Pipeliner) {
		for i, t := range topics {
			metas[i] = pipe.HGetAll(ctx, s.keys.meta(t))
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]*store.TopicRecord, len(topics))
	for i, t := range topics {
		meta, err := metas[i].Result()
		if err != nil {
			return nil, s.fail("topic", err)
		}
		tr := &store.TopicRecord{Name: t}
		if set, ok := meta["settings"]; ok {
			tr.Settings = []byte(set)
		}
		for p := range s.keys.parts {
			if err := addInfo(tr, cmds[i*s.keys.parts+p]); err != nil {
				return nil, err
			}
		}
		// No meta: never sent to nor set, or deleted (TopicDelete). A
		// deleted topic that holds messages (a send raced the delete) is
		// still shown, so that nothing sits in a topic nobody sees.
		if len(meta) == 0 && tr.Counts.Live() == 0 {
			continue
		}
		out[i] = tr
	}
	return out, nil
}

// addInfo adds one partition's info answer to a topic record.
func addInfo(tr *store.TopicRecord, cmd *redis.Cmd) error {
	a := asSlice(cmd.Val())
	if len(a) != 9 {
		return errReply("topic info", cmd.Val())
	}
	c := &tr.Counts
	c.Scheduled += asInt(a[1])
	c.Ready += asInt(a[2])
	c.Inflight += asInt(a[3])
	c.Dead += asInt(a[4])
	c.Acked += asInt(a[5])
	minInto(&tr.NextDue, a[6])
	minInto(&tr.OldestReady, a[7])
	minInto(&tr.NextLeaseExpiry, a[8])
	return nil
}

// minInto lowers *dst to the score v ("" = none); 0 in *dst means none.
func minInto(dst *int64, v any) {
	s := asString(v)
	if s == "" {
		return
	}
	if n := parseInt(s); *dst == 0 || n < *dst {
		*dst = n
	}
}

// TopicDelete implements store.Store. The topic's meta hash (settings,
// Seq counter, topic number) is deleted once its partitions hold no live
// message; the registry keeps the name, so the sweeps still purge its
// tombstones. A send revives the topic: its Seq reservation makes a new
// meta hash (and a new topic number, so Seq keeps growing). A send that
// reserved before the delete and inserts after it leaves a deleted topic
// holding a message, which TopicGet and TopicList show (see
// topicRecords); the delete then answers ErrConflict, with the settings
// put back.
func (s *Store) TopicDelete(ctx context.Context, topic string) (err error) {
	if err := s.check(); err != nil {
		return err
	}
	if err := checkTopic(topic); err != nil {
		return err
	}
	ctx, end := s.bound(ctx, 3)
	defer end(&err)
	recs, err := s.topicRecords(ctx, []string{topic})
	if err != nil {
		return err
	}
	tr := recs[0]
	if tr == nil {
		return fmt.Errorf("redisstore: topic %q: %w", topic, store.ErrNotFound)
	}
	if n := tr.Counts.Live(); n > 0 {
		return fmt.Errorf("redisstore: topic %q holds %d messages: %w", topic, n, store.ErrConflict)
	}
	if err := s.rdb.Del(ctx, s.keys.meta(topic)).Err(); err != nil {
		return s.fail("delete topic", err)
	}
	s.publish(ctx, topic, store.NotifySettings)
	if recs, err = s.topicRecords(ctx, []string{topic}); err != nil {
		return err
	}
	if recs[0] == nil || recs[0].Counts.Live() == 0 {
		return nil // deleted; or revived since by a send or settings put
	}
	if tr.Settings != nil {
		if err := s.rdb.HSetNX(ctx, s.keys.meta(topic), "settings", tr.Settings).Err(); err != nil {
			return s.fail("delete topic: put settings back", err)
		}
	}
	return fmt.Errorf("redisstore: topic %q: a send arrived while it was being deleted: %w", topic, store.ErrConflict)
}

// TopicSettingsPut implements store.Store: the settings field of the
// topic's meta hash and the registry, in one pipeline (two slots; each
// write idempotent).
func (s *Store) TopicSettingsPut(ctx context.Context, topic string, settings []byte) (err error) {
	if err := s.check(); err != nil {
		return err
	}
	ctx, end := s.bound(ctx, 1)
	defer end(&err)
	if err := checkTopic(topic); err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, s.keys.meta(topic), "settings", settings)
	pipe.SAdd(ctx, s.keys.topics(), topic)
	if _, err := pipe.Exec(ctx); err != nil {
		return s.fail("put topic settings", err)
	}
	s.publish(ctx, topic, store.NotifySettings)
	return nil
}
