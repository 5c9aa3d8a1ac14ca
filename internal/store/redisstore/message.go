package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// insertBody defines insertOne, which inserts the message whose id is
// ARGV[b], deduplicating by id, with the Seq counter ctr and topic number
// tn; ARGV[b+2 …] are its payload, headers (encodeHeaders; "" for none),
// due (Unix ms, or "+delay" after now), max attempts and priority
// (0-255). It appends dup and rec to out: dup is 1 when the id already
// existed (in any state, tombstones included; also a repeat within the
// call) and rec is then the existing record, else the new one without
// its payload (the blob's last part: the caller has it, and sending 1 KiB
// payloads back doubled what a batch send moved; readInserts fills it
// in from the request). A message
// due at or before now goes straight to ready. It returns the new
// message's store.NotifyDue (nil for a duplicate), which announce
// publishes for the earliest: each insert script publishes its
// notification itself, saving the client a round trip, and a send of
// duplicates announces nothing. Subscribers cannot hear it before the
// insert is durable: Redis writes (with appendfsync always, fsyncs) the
// AOF before it sends any client output, Pub/Sub messages included.
const insertBody = `
local function insertOne(out, b, tn, ctr)
  local id = ARGV[b]
  local k = mkey(id)
  local r = {st = 1, tn = tn, ctr = ctr, p = ARGV[b+2], h = ARGV[b+3],
    due = at(ARGV[b+4]), max = tonumber(ARGV[b+5]), pri = tonumber(ARGV[b+6]),
    cat = NOW, uat = NOW, t = 0, dlv = 0, fail = 0, rcpt = '', err = ''}
  local due = r.due
  if r.due <= NOW then r.st, due = 2, 0 end
  -- written only if the id is new (NX), the record there answered if not
  -- (GET): one command where a GET and then a SET were two
  local rec = whole(r, area(r))
  local old = redis.call('SET', k, rec, 'NX', 'GET')
  if old then
    out[#out+1] = 1
    out[#out+1] = old
    return nil
  end
  out[#out+1] = 0
  out[#out+1] = string.sub(rec, 1, #rec - #r.p)
  index(r, member(r, id), istr(r.due))
  return due
end
local function earlier(a, b)
  if not a or (b and b < a) then return b end
  return a
end
local function announce(channel, topic, due)
  if due then redis.call('PUBLISH', channel, topic .. '\t' .. istr(due)) end
end
`

// insertScript inserts messages of one partition whose Seq was reserved
// beforehand (reserveSeq): for a Cluster, where the topic's Seq counter
// is in another slot.
//
//	KEYS[1-5] the partition's indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] the topic number tn, ARGV[4] n, ARGV[5] the notification
//	channel, ARGV[6] the topic, then n groups of 7: id, ctr (Seq's
//	counter part), then insertOne's
//
// Returns {now, dup1, rec1, dup2, rec2, …} (insertOne) and publishes
// "topic\tdue", the earliest due of the new messages, if any.
var insertScript = libScript("insert", flagsGrow, insertBody+`
local out, tn, earliest = {NOW}, tonumber(ARGV[3]), nil
for i = 0, tonumber(ARGV[4]) - 1 do
  local b = 7 + i * 7
  earliest = earlier(earliest, insertOne(out, b, tn, tonumber(ARGV[b+1])))
end
announce(ARGV[5], ARGV[6], earliest)
return out
`)

// sendScript is a whole send in one round trip, for a single Redis
// server (or a Sentinel master), where a script may touch keys of any
// slot: it registers the topic, reserves the call's Seq block and
// numbers the topic as reserveSeq and assignTopicNumber do, then inserts
// every message, whatever its partition, all atomically, and publishes
// one notification. Never on a Cluster: the topic's meta hash, the
// registry and the topic-number counter are in other slots than the
// partitions (see "Key layout").
//
//	KEYS and ARGV[1 … A-1] as allPartsPrelude says; then KEYS[5P+1] the
//	topic's meta hash, KEYS[5P+2] the topic-number counter, KEYS[5P+3]
//	the topic registry
//	ARGV[A] "1" to add the topic to the registry, else ""; ARGV[A+1] n,
//	ARGV[A+2] the notification channel, ARGV[A+3] the topic, then n
//	groups of 8: partition, id, the message's place in the call (0, 1,
//	…; its Seq counter is the block's first plus that), then insertOne's
//
// Returns insertScript's answer, or {now, "corrupt", what, value} when
// the counter or the topic number is out of range (nothing inserted).
var sendScript = libScript("send", flagsGrow, allPartsPrelude+insertBody+`
local meta, n = KEYS[5*P+1], tonumber(ARGV[A+1])
if ARGV[A] == '1' then redis.call('SADD', KEYS[5*P+3], ARGV[A+3]) end
local last = redis.call('HINCRBY', meta, 'seq', n)
if last < n or last > `+strconv.Itoa(maxCtr)+` then return {NOW, 'corrupt', 'seq', last} end
local raw = redis.call('HGET', meta, 'tn')
local tn
if raw then
  tn = tonumber(raw)
  if not tn or tn < 1 or tn > `+strconv.Itoa(maxTN)+` or tn % 1 ~= 0 then return {NOW, 'corrupt', 'tn', raw} end
else
  tn = redis.call('INCR', KEYS[5*P+2])
  if tn < 1 or tn > `+strconv.Itoa(maxTN)+` then return {NOW, 'corrupt', 'topic number', tn} end
  redis.call('HSET', meta, 'tn', tn)
end
local out, base, earliest = {NOW}, last - n + 1, nil
for i = 0, n - 1 do
  local b = A + 4 + i * 8
  usePart(tonumber(ARGV[b]))
  earliest = earlier(earliest, insertOne(out, b + 1, tn, base + tonumber(ARGV[b+2])))
end
announce(ARGV[A+2], ARGV[A+3], earliest)
return out
`)

// MessageInsertMany implements store.Store. On a single Redis server
// (not a Cluster) the whole call is one round trip and atomic: sendScript
// registers the topic, reserves Seq, inserts into every partition and
// publishes. On a Cluster the topic is registered and a block of Seq
// numbers reserved in one round trip (the topic registry and the topic's
// Seq counter live outside the partitions' slots, so this is not part of
// the atomic insert: a failure after it leaves a known, empty topic and a
// gap in Seq, both harmless); then each partition's messages are inserted
// by one atomic script, all in one pipeline, and each script publishes
// its partition's earliest due. There the call is atomic per partition,
// not across partitions: after an error some partitions may hold their
// messages, and a retry with the same ids finds them as duplicates. All
// its round trips (up to three for a new topic) share one Timeout
// (Store.bound).
func (s *Store) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) (_ []store.InsertResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 1)
	defer end(&err)
	out := make([]store.InsertResult, len(p.Messages))
	if len(p.Messages) == 0 {
		return out, nil
	}
	if err := checkTopic(p.Topic); err != nil {
		return nil, err
	}
	for _, m := range p.Messages {
		if err := checkID(m.ID); err != nil {
			return nil, err
		}
		if err := checkDue(m.DueAt, m.Relative, m.Delay); err != nil {
			return nil, err
		}
	}
	now := s.nowArg(p.Now)
	if s.oneServer {
		reg := s.needsRegister(p.Topic)
		regArg := ""
		if reg {
			regArg = "1"
		}
		a := make([]any, 0, 4+8*len(p.Messages))
		a = append(a, regArg, len(p.Messages), s.keys.channel(), p.Topic)
		all := make([]int, len(p.Messages))
		for i, m := range p.Messages {
			all[i] = i
			a = append(a, s.keys.partitionOf(m.ID))
			a = appendInsert(a, m, uint64(i)) // #nosec G115 -- i is an index, >= 0
		}
		c := s.allPartsCall(sendScript, p.Topic, now, a...)
		c.keys = append(c.keys, s.keys.meta(p.Topic), s.keys.topicNums(), s.keys.topics())
		cmds, err := s.run(ctx, "insert", []call{c}, nil)
		if err != nil {
			return nil, err
		}
		if a := asSlice(cmds[0].Val()); len(a) == 4 && asString(a[1]) == "corrupt" {
			return nil, fmt.Errorf("redisstore: insert: topic %q: %v %v out of range: %w", p.Topic, a[2], a[3], store.ErrCorrupt)
		}
		if reg {
			s.regAt.Store(p.Topic, time.Now())
		}
		return s.readInserts(p, cmds, [][]int{all}, out)
	}
	tn, first, err := s.reserveSeq(ctx, p.Topic, len(p.Messages))
	if err != nil {
		return nil, err
	}
	// Group by partition, keeping each message's place in the answer.
	slots := make([][]int, s.keys.parts)
	args := make([][]any, s.keys.parts)
	for i, m := range p.Messages {
		part := s.keys.partitionOf(m.ID)
		if slots[part] == nil {
			args[part] = []any{tn, 0, s.keys.channel(), p.Topic}
		}
		slots[part] = append(slots[part], i)
		args[part] = appendInsert(args[part], m, first+uint64(i)) // #nosec G115 -- i is an index, >= 0
	}
	var calls []call
	var used [][]int
	for part, sl := range slots {
		if len(sl) == 0 {
			continue
		}
		args[part][1] = len(sl)
		calls = append(calls, s.partCall(insertScript, s.keys.part(p.Topic, part), now, args[part]...))
		used = append(used, sl)
	}
	cmds, err := s.run(ctx, "insert", calls, nil)
	if err != nil {
		return nil, err
	}
	return s.readInserts(p, cmds, used, out)
}

// appendInsert appends a message's insert arguments: id, ctr, then
// insertOne's.
func appendInsert(a []any, m store.InsertMessage, ctr uint64) []any {
	return append(a, m.ID, ctr, m.Payload, encodeHeaders(m.Headers),
		dueArg(m.DueAt, m.Relative, m.Delay), strconv.FormatInt(int64(m.MaxAttempts), 10), int(m.Priority))
}

// readInserts decodes the insert scripts' answers into out; used[c] are
// the indexes in p.Messages of cmds[c]'s messages. A new message's
// record comes back without its payload (insertOne), which is the one
// sent: a copy of it is filled in, nil when empty as a stored one reads.
func (s *Store) readInserts(p *store.MessageInsertManyParams, cmds []*redis.Cmd, used [][]int, out []store.InsertResult) ([]store.InsertResult, error) {
	for c, cmd := range cmds {
		a := asSlice(cmd.Val())
		if len(a) != 1+2*len(used[c]) { // #nosec G602 -- used and cmds are built together, an entry each
			return nil, errReply("insert", cmd.Val())
		}
		for j, i := range used[c] { // #nosec G602 -- as above
			m := &p.Messages[i]
			r, err := decodeBlob(p.Topic, m.ID, a[2+2*j])
			if err != nil {
				return nil, err
			}
			dup := asInt(a[1+2*j]) == 1
			if !dup && len(m.Payload) > 0 && !p.SenderKeepsBodies {
				r.Payload = bytes.Clone(m.Payload)
			}
			out[i] = store.InsertResult{Record: r, Duplicate: dup}
		}
	}
	return out, nil
}

// reserveSeq registers the topic and reserves n Seq numbers: it returns
// the topic number and the first counter value. The counter is a field of
// the topic's meta hash, so a send touches only the topic's own slot and
// its partitions' (a store-wide counter would be one hot slot for every
// send on a Cluster); Seq orders a topic's messages by send order, which
// is all ordering needs, and the topic number keeps it unique store-wide.
// Not part of the atomic insert: a failure after it leaves a known, empty
// topic and a gap in Seq, both harmless.
func (s *Store) reserveSeq(ctx context.Context, topic string, n int) (uint64, uint64, error) {
	meta := s.keys.meta(topic)
	pipe := s.rdb.Pipeline()
	reg := s.needsRegister(topic)
	if reg {
		pipe.SAdd(ctx, s.keys.topics(), topic)
	}
	incr := pipe.HIncrBy(ctx, meta, "seq", int64(n))
	tnCmd := pipe.HGet(ctx, meta, "tn")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) { // Nil: no tn yet
		return 0, 0, s.fail("insert: reserve seq", err)
	}
	if reg {
		s.regAt.Store(topic, time.Now())
	}
	last, err := incr.Result()
	if err != nil {
		return 0, 0, s.fail("insert: reserve seq", err)
	}
	if last < int64(n) || last > maxCtr {
		return 0, 0, fmt.Errorf("redisstore: insert: topic %q: Seq counter %d out of range: %w", topic, last, store.ErrCorrupt)
	}
	tn, err := tnCmd.Uint64()
	switch {
	case errors.Is(err, redis.Nil):
		if tn, err = s.assignTopicNumber(ctx, topic); err != nil {
			return 0, 0, err
		}
	case err != nil || tn < 1 || tn > maxTN:
		return 0, 0, fmt.Errorf("redisstore: %s tn = %q: %w", meta, tnCmd.Val(), store.ErrCorrupt)
	}
	return tn, uint64(last) - uint64(n) + 1, nil // #nosec G115 -- n = len(p.Messages) >= 0 and n <= last <= maxCtr, checked above
}

// assignTopicNumber gives a topic its number, once: a new number from the
// store-wide counter, kept only if the topic has none (HSETNX), so racing
// servers agree. A lost race wastes a number, which is harmless.
func (s *Store) assignTopicNumber(ctx context.Context, topic string) (uint64, error) {
	n, err := s.rdb.Incr(ctx, s.keys.topicNums()).Result()
	if err != nil {
		return 0, s.fail("insert: number topic", err)
	}
	if n < 1 || n > maxTN {
		return 0, fmt.Errorf("redisstore: insert: topic number %d out of range 1-%d: %w", n, maxTN, store.ErrCorrupt)
	}
	meta := s.keys.meta(topic)
	pipe := s.rdb.Pipeline()
	pipe.HSetNX(ctx, meta, "tn", n)
	get := pipe.HGet(ctx, meta, "tn")
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, s.fail("insert: number topic", err)
	}
	tn, err := get.Uint64()
	if err != nil || tn < 1 || tn > maxTN {
		return 0, fmt.Errorf("redisstore: %s tn = %q: %w", meta, get.Val(), store.ErrCorrupt)
	}
	return tn, nil
}

// MessageGet implements store.Store. A single GET: no script.
func (s *Store) MessageGet(ctx context.Context, topic, id string) (_ *store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 1) // a new connection's handshake is a round trip too
	defer end(&err)
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	k := s.keys.part(topic, s.keys.partitionOf(id))
	b, err := s.rdb.Get(ctx, k.msg(id)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisstore: get: message %q in topic %q: %w", id, topic, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail("get", err)
	}
	return decodeBlob(topic, id, b)
}

// cancelScript deletes a scheduled, ready or inflight message.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix, ARGV[3] id
//
// Returns {now, "ok", record as it was} | {now, "nf"} | {now, "conflict", state}.
var cancelScript = libScript("cancel", flagsState, `
local id = ARGV[3]
local k = mkey(id)
local r, b = load(k)
if not r then return {NOW, 'nf'} end
if r.st > 3 then return {NOW, 'conflict', r.st} end
unindex(r, member(r, id))
redis.call('DEL', k)
return {NOW, 'ok', b}
`)

// MessageCancel implements store.Store.
func (s *Store) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	return s.oneMessage(ctx, "cancel", cancelScript, p.Topic, p.ID, p.Now, false)
}

// rescheduleScript sets the due time of a scheduled or ready message.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] id, ARGV[4] due (Unix ms, or "+delay" after now)
//
// Returns {now, "ok", record} | {now, "nf"} | {now, "conflict", state}.
var rescheduleScript = libScript("reschedule", flagsState, `
local id, due = ARGV[3], at(ARGV[4])
local k = mkey(id)
local r = load(k)
if not r then return {NOW, 'nf'} end
if r.st ~= 1 and r.st ~= 2 then return {NOW, 'conflict', r.st} end
local m = member(r, id)
unindex(r, m)
r.st, r.due, r.uat = 1, due, NOW
if due <= NOW then r.st = 2 end
index(r, m, istr(due))
return {NOW, 'ok', save(k, r)}
`)

// MessageReschedule implements store.Store.
func (s *Store) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	if err := checkDue(p.DueAt, p.Relative, p.Delay); err != nil {
		return nil, err
	}
	return s.oneMessage(ctx, "reschedule", rescheduleScript, p.Topic, p.ID, p.Now, true, dueArg(p.DueAt, p.Relative, p.Delay))
}

// oneMessage runs a script that names one message (ARGV[3] = id, then
// args) and decodes its status answer; notify publishes the new due time
// unless the message ended dead.
func (s *Store) oneMessage(ctx context.Context, op string, sc *script, topic, id string, now int64, notify bool, args ...any) (_ *store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 1) // the script and the notification
	defer end(&err)
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	k := s.keys.part(topic, s.keys.partitionOf(id))
	cmds, err := s.run(ctx, op, []call{s.partCall(sc, k, s.nowArg(now), append([]any{id}, args...)...)}, nil)
	if err != nil {
		return nil, err
	}
	st, err := readStatus(cmds[0])
	if err != nil {
		return nil, err
	}
	if st.code != "ok" {
		return nil, statusErr(op, topic, id, st)
	}
	if len(st.rest) != 1 {
		return nil, errReply(op, cmds[0].Val())
	}
	r, err := decodeBlob(topic, id, st.rest[0])
	if err != nil {
		return nil, err
	}
	if notify && (r.State == store.StateScheduled || r.State == store.StateReady) {
		s.publish(ctx, topic, store.NotifyDue(r))
	}
	return r, nil
}
