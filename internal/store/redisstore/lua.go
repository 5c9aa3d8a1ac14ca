package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// Every script that changes a partition runs on the five index keys of
// that partition, in this order:
//
//	KEYS[1] sched  ZSET  score DueAt,      member seq:id   (scheduled)
//	KEYS[2] ready  ZSET  score DueAt,      member seq:id   (ready)
//	KEYS[3] lease  ZSET  score LeaseUntil, member seq:id   (inflight)
//	KEYS[4] dead   ZSET  score DeadAt,     member seq:id   (dead)
//	KEYS[5] acked  ZSET  score AckedAt,    member seq:id   (acked tombstones)
//
// so KEYS[state] is the index of store.State state; and on these ARGV:
//
//	ARGV[1] now: "" to read Redis TIME, or Unix ms (TimeCaller)
//	ARGV[2] the partition's message-key prefix (message hash = ARGV[2]..id)
//	ARGV[3…] the script's own arguments, documented beside its method.
//
// Message hashes are built from ARGV[2] inside the scripts; they carry the
// partition's hash tag, so they are in the slot of KEYS (Redis checks this
// for scripts with a shebang: a mistake fails loudly, it never crosses
// slots). A message hash has the fields
//
//	id, seq (20-digit), st (state 1-5), p (payload), h (headers, see
//	encodeHeaders),
//	due, cat (CreatedAt), uat (UpdatedAt), dlv, fail, max, err,
//	rcpt, lu (LeaseUntil), dead (DeadAt), ack (AckedAt)
//
// with absent fields read as zero. Scripts answer {now, …}; numbers they
// store go through istr so Redis never sees a float.
const luaPrelude = `
local NOW
if ARGV[1] ~= '' then
  NOW = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function istr(n) return string.format('%d', n) end
local NOW_S = istr(NOW)
local IDX = KEYS
local MPFX = ARGV[2]
local function mkey(id) return MPFX .. id end
local function idof(m) return string.sub(m, 22) end
local function memberof(k, id) return redis.call('HGET', k, 'seq') .. ':' .. id end
local function rec(k) return redis.call('HGETALL', k) end
-- leased checks that k is inflight under receipt: 'ok' | 'nf' | 'conflict', state.
local function leased(k, receipt)
  local v = redis.call('HMGET', k, 'st', 'rcpt')
  if not v[1] then return 'nf', '0' end
  if v[1] ~= '3' or v[2] ~= receipt then return 'conflict', v[1] end
  return 'ok', v[1]
end
-- fail counts a failure of the inflight message k (member m, already out
-- of the lease index) and sends it to dead, or back at retry (a string).
local function fail(k, m, retry, reason)
  local f = redis.call('HINCRBY', k, 'fail', 1)
  local max = tonumber(redis.call('HGET', k, 'max') or '0')
  redis.call('HSET', k, 'err', reason, 'uat', NOW_S)
  redis.call('HDEL', k, 'rcpt', 'lu')
  if f >= max then
    redis.call('HSET', k, 'st', '4', 'dead', NOW_S)
    redis.call('ZADD', IDX[4], NOW_S, m)
  elseif tonumber(retry) <= NOW then
    redis.call('HSET', k, 'st', '2', 'due', retry)
    redis.call('ZADD', IDX[2], retry, m)
  else
    redis.call('HSET', k, 'st', '1', 'due', retry)
    redis.call('ZADD', IDX[1], retry, m)
  end
end
`

// Script flags (Redis 7 shebang). A script with a shebang and without
// allow-oom is refused up front when Redis is at maxmemory, so it can
// never stop half-way for lack of memory. Only inserts grow the data set;
// every other transition moves an existing message (ack and delete free
// memory), so those allow OOM: at maxmemory, sends fail while consumers
// keep leasing, acking and draining.
const (
	flagsGrow  = "#!lua\n"
	flagsState = "#!lua flags=allow-oom\n"
	flagsRead  = "#!lua flags=no-writes\n"
)

func newScript(flags, body string) *redis.Script {
	return redis.NewScript(flags + luaPrelude + body)
}

// call is one script invocation on one partition.
type call struct {
	sc   *redis.Script
	keys []string
	args []any
}

// partCall builds a call on partition keys k with now and extra args.
func (s *Store) partCall(sc *redis.Script, k *partKeys, now string, args ...any) call {
	return call{sc: sc, keys: k.all(), args: append([]any{now, k.msgPrefix}, args...)}
}

// run executes calls in one pipeline (go-redis splits it per node on a
// Cluster) with EVALSHA, re-running with EVAL any that found the script
// cache empty (a restarted Redis): NOSCRIPT means it did not run. extra
// adds plain commands to the same pipeline. The first error fails the
// whole batch; scripts that did run keep their effect, as with any
// ambiguous failure.
func (s *Store) run(ctx context.Context, op string, calls []call, extra func(redis.Pipeliner)) ([]*redis.Cmd, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 && extra == nil {
		c := calls[0]
		cmds[0] = c.sc.Run(ctx, s.rdb, c.keys, c.args...)
		if err := cmds[0].Err(); err != nil {
			return nil, s.fail(op, err)
		}
		return cmds, nil
	}
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.sc.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	if extra != nil {
		extra(pipe)
	}
	_, perr := pipe.Exec(ctx)
	for i, c := range calls {
		if err := cmds[i].Err(); err != nil && isNoScript(err) {
			cmds[i] = c.sc.Run(ctx, s.rdb, c.keys, c.args...)
		}
		if err := cmds[i].Err(); err != nil {
			return nil, s.fail(op, err)
		}
	}
	if perr != nil && !isNoScript(perr) && !errors.Is(perr, redis.Nil) {
		return nil, s.fail(op, perr)
	}
	return cmds, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// reply helpers. A malformed reply means a script and this code disagree:
// it is reported as corruption, never silently skipped.

func errReply(what string, v any) error {
	return fmt.Errorf("redisstore: unexpected script reply for %s: %T %v: %w", what, v, v, store.ErrCorrupt)
}

func asSlice(v any) []any {
	a, _ := v.([]any)
	return a
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		return parseInt(x)
	default:
		return 0
	}
}

// parseInt reads a stored integer; scores may come back in float form.
func parseInt(s string) int64 {
	if s == "" {
		return 0
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// encodeHeaders writes headers binary-safely (JSON would mangle invalid
// UTF-8): for each key in sorted order, uvarint len, key, uvarint len,
// value. Empty or nil headers encode to nil (the field is not stored).
func encodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(h)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		b = append(b, h[k]...)
	}
	return b
}

func decodeHeaders(b []byte) (map[string]string, error) {
	h := map[string]string{}
	next := func() (string, error) {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return "", errors.New("truncated headers")
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, nil
	}
	for len(b) > 0 {
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		h[k] = v
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

// decodeRecord reads a message hash returned as HGETALL's flat array.
func decodeRecord(topic string, v any) (*store.Record, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 || len(arr)%2 != 0 {
		return nil, errReply("record", v)
	}
	r := &store.Record{Topic: topic}
	for i := 0; i < len(arr); i += 2 {
		f, val := asString(arr[i]), asString(arr[i+1])
		switch f {
		case "id":
			r.ID = val
		case "seq":
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redisstore: record %s/%s: seq %q: %w", topic, r.ID, val, store.ErrCorrupt)
			}
			r.Seq = n
		case "st":
			r.State = store.State(parseInt(val))
		case "p":
			if val != "" {
				r.Payload = []byte(val)
			}
		case "h":
			h, err := decodeHeaders([]byte(val))
			if err != nil {
				return nil, fmt.Errorf("redisstore: record %s/%s: %w: %v", topic, r.ID, store.ErrCorrupt, err)
			}
			r.Headers = h
		case "due":
			r.DueAt = parseInt(val)
		case "cat":
			r.CreatedAt = parseInt(val)
		case "uat":
			r.UpdatedAt = parseInt(val)
		case "dlv":
			r.Deliveries = int32(parseInt(val))
		case "fail":
			r.Failures = int32(parseInt(val))
		case "max":
			r.MaxAttempts = int32(parseInt(val))
		case "err":
			r.LastError = val
		case "rcpt":
			r.Receipt = val
		case "lu":
			r.LeaseUntil = parseInt(val)
		case "dead":
			r.DeadAt = parseInt(val)
		case "ack":
			r.AckedAt = parseInt(val)
		}
	}
	if r.State < store.StateScheduled || r.State > store.StateAcked {
		return nil, fmt.Errorf("redisstore: record %s/%s: state %d: %w", topic, r.ID, r.State, store.ErrCorrupt)
	}
	return r, nil
}

// decodeRecords reads a list of HGETALL arrays.
func decodeRecords(topic string, vs []any) ([]*store.Record, error) {
	out := make([]*store.Record, 0, len(vs))
	for _, v := range vs {
		r, err := decodeRecord(topic, v)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// status is the answer of a script that names one message:
// {now, "ok"|"nf"|"conflict", record-or-state}.
type status struct {
	now  int64
	code string
	rest []any
}

func readStatus(cmd *redis.Cmd) (status, error) {
	a := asSlice(cmd.Val())
	if len(a) < 2 {
		return status{}, errReply(cmd.Name(), cmd.Val())
	}
	return status{now: asInt(a[0]), code: asString(a[1]), rest: a[2:]}, nil
}

// statusErr maps a non-ok status to the contract's errors.
func statusErr(op, topic, id string, st status) error {
	switch st.code {
	case "nf":
		return fmt.Errorf("redisstore: %s: message %q in topic %q: %w", op, id, topic, store.ErrNotFound)
	case "conflict":
		state := "?"
		if len(st.rest) > 0 {
			state = store.State(asInt(st.rest[0])).String()
		}
		return fmt.Errorf("redisstore: %s: message %q in topic %q is %s or the receipt is stale: %w", op, id, topic, state, store.ErrConflict)
	default:
		return fmt.Errorf("redisstore: %s: unexpected status %q: %w", op, st.code, store.ErrCorrupt)
	}
}
