package redisstore

import (
	"cmp"
	"context"
	"crypto/sha1" // #nosec G505 -- the script SHA-1 that EVALSHA/SCRIPT LOAD require, not a security hash
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// Every script that changes a partition runs on the five index keys of
// that partition, in this order:
//
//	KEYS[1] sched  ZSET  score DueAt,      member ctr62 .. id   (scheduled)
//	KEYS[2] ready  ZSET  score DueAt,      member  "            (ready)
//	KEYS[3] lease  ZSET  score LeaseUntil, member  "            (inflight)
//	KEYS[4] dead   ZSET  score DeadAt,     member  "            (dead)
//	KEYS[5] acked  ZSET  score AckedAt,    member  "            (acked tombstones)
//
// so KEYS[state] is the index of store.State state; and on these ARGV:
//
//	ARGV[1] now: "" to read Redis TIME, or Unix ms (TimeCaller)
//	ARGV[2] the partition's message-key prefix (message key = ARGV[2]..id)
//	ARGV[3…] the script's own arguments, documented beside its method.
//
// Message keys are built from ARGV[2] inside the scripts; they carry the
// partition's hash tag, so they are in the slot of KEYS (Redis checks this
// for scripts with a shebang: a mistake fails loudly, it never crosses
// slots).
//
// A message is one STRING: a fixed binary header, three length-prefixed
// strings, then the payload (see recHeader and decodeBlob). One string
// per message, rather than a hash with a field per record field, because
// a payload longer than hash-max-listpack-value (64 B by default) turns a
// hash into a hashtable with a dict entry and two SDS per field: that was
// most of the old layout's ~1.2 KB per message. The id is not stored: it
// is in the key, and in the index member.
//
// Index members are ctr62(counter) .. id, where counter is the topic-local
// part of Seq and ctr62 an order-preserving encoding (a length digit, then
// base 62), so equal scores order by Seq and the member names the message.
// Scripts answer {now, …}; numbers they store go through istr (or the
// struct library) so Redis never sees a float.
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
-- at resolves a time argument: '+d' is d ms after NOW (a duration the
-- engine sent, so the instant comes from this script's clock, not the
-- caller's), anything else an absolute Unix ms.
local function at(a)
  if string.byte(a) == 43 then return NOW + tonumber(string.sub(a, 2)) end
  return tonumber(a)
end
local IDX = KEYS
local MPFX = ARGV[2]
local function mkey(id) return MPFX .. id end
-- Index members: ctr62(ctr) .. id; the first byte is '0' + digit count.
local B62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
local function ctr62(n)
  local s = ''
  repeat
    local d = n % 62
    s = string.sub(B62, d + 1, d + 1) .. s
    n = (n - d) / 62
  until n == 0
  return string.char(48 + #s) .. s
end
local function seqof(m) return string.sub(m, 1, string.byte(m) - 47) end
local function idof(m) return string.sub(m, string.byte(m) - 46) end
-- A message record (see decodeBlob): st tn ctr due cat uat t dlv fail max,
-- then rcpt, err, h (length-prefixed), then the payload p. t is
-- LeaseUntil when inflight, DeadAt when dead, AckedAt when acked, else 0.
local HDR = '>BI3I6i6i6i6i6i4i4i4'
local VAR = '>I2c0I4c0I4c0'
local function load(k)
  local b = redis.call('GET', k)
  if not b then return nil end
  local r, pos = {}, nil
  r.st, r.tn, r.ctr, r.due, r.cat, r.uat, r.t, r.dlv, r.fail, r.max, pos = struct.unpack(HDR, b)
  r.rcpt, r.err, r.h, pos = struct.unpack(VAR, b, pos)
  r.p = string.sub(b, pos)
  return r, b
end
-- save writes r to k and returns the stored bytes (the script's answer).
local function save(k, r)
  local b = struct.pack(HDR, r.st, r.tn, r.ctr, r.due, r.cat, r.uat, r.t, r.dlv, r.fail, r.max) ..
    struct.pack(VAR, #r.rcpt, r.rcpt, #r.err, r.err, #r.h, r.h) .. r.p
  redis.call('SET', k, b)
  return b
end
local function member(r, id) return ctr62(r.ctr) .. id end
-- leased loads k and checks that it is inflight under receipt:
-- 'ok' | 'nf' | 'conflict', the state, and the record.
local function leased(k, receipt)
  local r = load(k)
  if not r then return 'nf', 0 end
  if r.st ~= 3 or r.rcpt ~= receipt then return 'conflict', r.st end
  return 'ok', r.st, r
end
-- fail counts a failure of the inflight record r (member m, already out
-- of the lease index) and sends it to dead, or back at retry (a number).
local function fail(r, m, retry, reason)
  r.fail = r.fail + 1
  r.err, r.uat, r.rcpt, r.t = reason, NOW, '', 0
  if r.fail >= r.max then
    r.st, r.t = 4, NOW
    redis.call('ZADD', IDX[4], NOW_S, m)
  elseif retry <= NOW then
    r.st, r.due = 2, retry
    redis.call('ZADD', IDX[2], istr(retry), m)
  else
    r.st, r.due = 1, retry
    redis.call('ZADD', IDX[1], istr(retry), m)
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

// script is a Lua script and its SHA-1, run through noRetry commands.
type script struct {
	src, sha string
}

func newScript(flags, body string) *script {
	src := flags + luaPrelude + body
	h := sha1.Sum([]byte(src)) // #nosec G401 -- the script ID Redis's EVALSHA requires (SHA-1 by protocol), not a security hash
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// noRetry is a script call go-redis must never send twice: a timeout after
// Redis ran a script is ambiguous, and a resent transition applies twice
// (an insert then answers "duplicate", a lease hands out a message that no
// caller sees). MaxRetries -1 is not enough: ClusterClient resends on
// network errors up to MaxRedirects times whatever MaxRetries says, and
// Options.Client may retry at will. go-redis honours NoRetry on every
// path (client, cluster, pipelines) and still follows MOVED and ASK,
// which mean the command did not run.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// cmd builds EVALSHA (sha) or EVAL of the script.
func (sc *script) cmd(ctx context.Context, sha bool, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	if sha {
		a = append(a, "evalsha", sc.sha)
	} else {
		a = append(a, "eval", sc.src)
	}
	a = append(a, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}

// processor is a client or pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// run executes the script with EVALSHA, then EVAL if the script cache
// lacks it (NOSCRIPT: it did not run), each sent at most once.
func (sc *script) run(ctx context.Context, c processor, keys []string, args ...any) *redis.Cmd {
	cmd := sc.cmd(ctx, true, keys, args)
	_ = c.Process(ctx, noRetry{cmd})
	if isNoScript(cmd.Err()) {
		cmd = sc.cmd(ctx, false, keys, args)
		_ = c.Process(ctx, noRetry{cmd})
	}
	return cmd
}

// call is one script invocation on one partition.
type call struct {
	sc   *script
	keys []string
	args []any
}

// partCall builds a call on partition keys k with now and extra args.
func (s *Store) partCall(sc *script, k *partKeys, now string, args ...any) call {
	return call{sc: sc, keys: k.all(), args: append([]any{now, k.msgPrefix}, args...)}
}

// run executes calls in one pipeline (go-redis splits it per node on a
// Cluster) with EVALSHA, re-running any that found the script cache empty
// (a restarted Redis): NOSCRIPT means it did not run. No call is ever
// resent otherwise (noRetry). extra adds plain commands to the same
// pipeline. The first error fails the whole batch; scripts that did run
// keep their effect, as with any ambiguous failure. The whole run is
// bounded by one Timeout unless ctx ends sooner (see Store.bound).
func (s *Store) run(ctx context.Context, op string, calls []call, extra func(redis.Pipeliner)) (_ []*redis.Cmd, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx, 1)
	defer end(&err)
	cmds, perr := s.exec(ctx, calls, extra)
	for i := range calls {
		if err := cmds[i].Err(); err != nil {
			return nil, s.fail(op, err)
		}
	}
	if perr != nil && !isNoScript(perr) && !errors.Is(perr, redis.Nil) {
		return nil, s.fail(op, perr)
	}
	return cmds, nil
}

// runEach is run for calls on partitions that do not depend on each
// other: each call succeeds or fails by itself. errs[i] is nil when
// cmds[i] holds an answer, else why not (wrapping ErrUnavailable, or
// ErrClosed). On a Cluster the calls on a master that is down fail while
// the others are answered (execEach); callers go on with those (see
// "Cluster" in the package doc).
func (s *Store) runEach(ctx context.Context, op string, calls []call) ([]*redis.Cmd, []error) {
	if len(calls) == 0 {
		return nil, nil
	}
	errs := make([]error, len(calls))
	if err := s.check(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return make([]*redis.Cmd, len(calls)), errs
	}
	b := s.boundFor(ctx, s.timeout, boundCall)
	defer b.stop()
	cmds := s.execEach(b.ctx, calls)
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			errs[i] = b.wrap(s.fail(op, err))
		}
	}
	return cmds, errs
}

// execEach is exec for runEach. On a Cluster it sends each master's calls
// in a pipeline of their own, all at once: in one pipeline, go-redis
// retries a master it cannot connect to until the deadline, then marks
// every call of the pipeline failed, those other masters answered
// included — and a lease that ran but reads as failed is a lease nobody
// holds. Each master's NOSCRIPT re-runs then also wait for no other.
func (s *Store) execEach(ctx context.Context, calls []call) []*redis.Cmd {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || len(calls) < 2 {
		cmds, _ := s.exec(ctx, calls, nil)
		return cmds
	}
	groups := map[string][]int{} // master address ("": unknown, let go-redis route) -> calls
	for i, c := range calls {
		addr := ""
		if node, err := cc.MasterForKey(ctx, c.keys[0]); err == nil {
			addr = node.Options().Addr
		}
		groups[addr] = append(groups[addr], i)
	}
	if len(groups) == 1 {
		cmds, _ := s.exec(ctx, calls, nil)
		return cmds
	}
	cmds := make([]*redis.Cmd, len(calls))
	var wg sync.WaitGroup
	for _, idx := range groups {
		wg.Go(func() {
			part := make([]call, len(idx))
			for j, i := range idx {
				part[j] = calls[i]
			}
			got, _ := s.exec(ctx, part, nil)
			for j, i := range idx {
				cmds[i] = got[j]
			}
		})
	}
	wg.Wait()
	return cmds
}

// exec sends calls (and extra) in one pipeline, or as one command when
// there is one call and no extra, and re-runs those that found the script
// cache empty. Each call's outcome is in its Cmd; the error is the
// pipeline's.
func (s *Store) exec(ctx context.Context, calls []call, extra func(redis.Pipeliner)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 && extra == nil {
		c := calls[0]
		cmds[0] = c.sc.run(ctx, s.rdb, c.keys, c.args...)
		return cmds, nil
	}
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.sc.cmd(ctx, true, c.keys, c.args)
		_ = pipe.Process(ctx, noRetry{cmds[i]})
	}
	if extra != nil {
		extra(pipe)
	}
	_, perr := pipe.Exec(ctx)
	s.rerunNoScript(ctx, calls, cmds)
	return cmds, perr
}

// rerunNoScript re-runs the calls whose EVALSHA found the script cache
// empty (NOSCRIPT: they did not run), in pipelines rather than one round
// trip each, so that the first sweep after a Redis restart is not
// O(topics × partitions) round trips. In each pipeline the first call of
// each script is an EVAL (loading the script on that call's server), the
// others EVALSHA; on a Cluster those on a server the EVAL did not reach
// answer NOSCRIPT again and go to the next pipeline, which is smaller by
// at least one call per script, so this ends. Each call is still sent at
// most once per NOSCRIPT answer.
func (s *Store) rerunNoScript(ctx context.Context, calls []call, cmds []*redis.Cmd) {
	for {
		var redo []int
		for i := range calls {
			if isNoScript(cmds[i].Err()) {
				redo = append(redo, i)
			}
		}
		switch len(redo) {
		case 0:
			return
		case 1:
			c := calls[redo[0]]
			cmds[redo[0]] = c.sc.run(ctx, s.rdb, c.keys, c.args...)
			return
		}
		pipe := s.rdb.Pipeline()
		loaded := map[*script]bool{}
		for _, i := range redo {
			c := calls[i]
			cmds[i] = c.sc.cmd(ctx, loaded[c.sc], c.keys, c.args)
			loaded[c.sc] = true
			_ = pipe.Process(ctx, noRetry{cmds[i]})
		}
		if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
			return // the callers fail on the first error of cmds
		}
	}
}

// bound gives one Store call its whole-call deadline: rounds × the
// store's timeout from now, unless ctx ends sooner (then ctx is kept).
// go-redis applies a context deadline to the pool wait, the connection
// handshake and every read and write (ContextTimeoutEnabled, which Open
// sets on the clients it makes), so a call that makes several round
// trips — a send registers the topic and reserves Seq, then inserts, then
// publishes; a lease peeks, then leases — fails within about one Timeout
// while Redis hangs, not one per round trip. Nothing is retried: a round
// trip cut by the deadline is as ambiguous as any timeout (a script may
// have run), and the call fails as it would on a read timeout. Nested
// bounds cost nothing: an inner call sees the outer deadline, which is
// earlier, and keeps it.
//
// The returned func cancels the deadline and, when it (not the caller's
// ctx) ended the call, hides the context error: the caller's context did
// not end, and callers treat context errors as "the caller gave up". The
// error still wraps store.ErrUnavailable (and os.ErrDeadlineExceeded).
func (s *Store) bound(ctx context.Context, rounds int) (context.Context, func(*error)) {
	b := s.boundFor(ctx, time.Duration(rounds)*s.timeout, boundCall)
	return b.ctx, func(errp *error) {
		b.stop()
		if errp != nil {
			*errp = b.wrap(*errp)
		}
	}
}

// callBound is a deadline set by Store.boundFor.
type callBound struct {
	ctx, parent context.Context
	d           time.Duration
	what        string
	cancel      context.CancelFunc // nil when parent's deadline was kept
}

// Names of bounds, for boundError's message.
const (
	boundCall = "the call's time bound, Options.Timeout"
	boundPeek = "half the time left to the call, given to reading the partitions' heads"
)

// boundFor is bound for a duration d (none when d <= 0).
func (s *Store) boundFor(ctx context.Context, d time.Duration, what string) *callBound {
	b := &callBound{ctx: ctx, parent: ctx, d: d, what: what}
	if d <= 0 {
		return b
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return b
	}
	b.ctx, b.cancel = context.WithTimeoutCause(ctx, d, errCallBound)
	return b
}

func (b *callBound) stop() {
	if b.cancel != nil {
		b.cancel()
	}
}

// wrap turns err into a boundError when this bound's own deadline ended
// the round trip and the caller's ctx did not end. It may be called
// after stop: a context's cause is fixed once it is done.
func (b *callBound) wrap(err error) error {
	if err == nil || b.cancel == nil || context.Cause(b.ctx) != errCallBound ||
		b.parent.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &boundError{err: err, d: b.d, what: b.what}
}

// errCallBound is the cause of a deadline set by Store.bound.
var errCallBound = errors.New("redisstore: the call's time bound passed")

// boundError is a call that its own time bound ended: store.ErrUnavailable,
// and not a context error.
type boundError struct {
	err  error
	d    time.Duration
	what string
}

func (e *boundError) Error() string {
	return strings.ReplaceAll(e.err.Error(), context.DeadlineExceeded.Error(),
		"no answer within "+e.d.Round(time.Millisecond).String()+" ("+e.what+")")
}

func (e *boundError) Unwrap() []error { return []error{store.ErrUnavailable, os.ErrDeadlineExceeded} }

func (e *boundError) Timeout() bool { return true }

// callTimeout is the whole-call bound of Store.bound: Options.Timeout, or
// for a client passed in Options.Client without one, that client's
// ReadTimeout (none when it has no read timeout).
func callTimeout(o Options) time.Duration {
	if o.Client == nil || o.Timeout != 0 {
		return cmp.Or(o.Timeout, DefaultTimeout)
	}
	rt := DefaultTimeout
	switch c := o.Client.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	}
	return max(rt, 0)
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
		if w <= 0 || uint64(len(b[w:])) < n {
			return "", errors.New("truncated headers")
		}
		b = b[w:]
		s := string(b[:n]) // n <= len(b), checked above
		b = b[n:]
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

// recHeader is the size of a message record's fixed header (HDR in the
// Lua prelude), all big-endian:
//
//	st   1  state (1-5)
//	tn   3  topic number  \ Seq = tn<<ctrBits | ctr
//	ctr  6  counter       /
//	due  6  DueAt            (signed; Unix ms)
//	cat  6  CreatedAt
//	uat  6  UpdatedAt
//	t    6  LeaseUntil (inflight), DeadAt (dead), AckedAt (acked), else 0
//	dlv  4  Deliveries       (signed)
//	fail 4  Failures
//	max  4  MaxAttempts
//
// followed by Receipt (uint16 length + bytes), LastError (uint32 length +
// bytes), headers (uint32 length + encodeHeaders bytes), and the payload
// as the rest. One slot t serves three times because the contract keeps
// LeaseUntil, DeadAt and AckedAt zero outside their state. 46 + 10 bytes
// of overhead: a 256-byte payload stays in jemalloc's 320-byte class.
const recHeader = 1 + 3 + 6 + 4*6 + 3*4

// blobReader reads a record's fields in order; a short read marks it bad.
type blobReader struct {
	b   string
	bad bool
}

func (r *blobReader) uint(n int) uint64 {
	if len(r.b) < n {
		r.bad, r.b = true, ""
		return 0
	}
	var v uint64
	for i := range n {
		v = v<<8 | uint64(r.b[i])
	}
	r.b = r.b[n:]
	return v
}

// int reads an n-byte two's-complement integer.
func (r *blobReader) int(n int) int64 {
	shift := 64 - 8*n
	return int64(r.uint(n)<<shift) >> shift // #nosec G115 -- sign extension: bit reinterpretation of the n-byte field shifted to the top, then an arithmetic shift back
}

func (r *blobReader) str(lenBytes int) string {
	n := r.uint(lenBytes)
	if r.bad || uint64(len(r.b)) < n {
		r.bad, r.b = true, ""
		return ""
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// decodeBlob reads a message record as a script stored it (a STRING; see
// recHeader). The id is not in the value: the caller knows it.
func decodeBlob(topic, id string, v any) (*store.Record, error) {
	b, ok := v.(string)
	if !ok {
		return nil, errReply("record", v)
	}
	r := &blobReader{b: b}
	rec := &store.Record{Topic: topic, ID: id}
	rec.State = store.State(r.uint(1)) // #nosec G115 -- a 1-byte field (< 256); unknown states are rejected below
	tn, ctr := r.uint(3), r.uint(6)
	rec.Seq = tn<<ctrBits | ctr
	rec.DueAt, rec.CreatedAt, rec.UpdatedAt = r.int(6), r.int(6), r.int(6)
	t := r.int(6)
	rec.Deliveries, rec.Failures, rec.MaxAttempts = int32(r.int(4)), int32(r.int(4)), int32(r.int(4)) // #nosec G115 -- 4-byte fields sign-extended by r.int: always in int32's range
	rec.Receipt, rec.LastError = r.str(2), r.str(4)
	h := r.str(4)
	if r.bad {
		return nil, fmt.Errorf("redisstore: record %s/%s: truncated (%d bytes): %w", topic, id, len(b), store.ErrCorrupt)
	}
	if len(r.b) > 0 {
		rec.Payload = []byte(r.b)
	}
	if h != "" {
		hd, err := decodeHeaders([]byte(h))
		if err != nil {
			return nil, fmt.Errorf("redisstore: record %s/%s: %w: %v", topic, id, store.ErrCorrupt, err)
		}
		rec.Headers = hd
	}
	switch rec.State {
	case store.StateInflight:
		rec.LeaseUntil = t
	case store.StateDead:
		rec.DeadAt = t
	case store.StateAcked:
		rec.AckedAt = t
	case store.StateScheduled, store.StateReady:
	default:
		return nil, fmt.Errorf("redisstore: record %s/%s: state %d: %w", topic, id, rec.State, store.ErrCorrupt)
	}
	return rec, nil
}

// decodePairs reads a script's list of records as id, record pairs.
func decodePairs(topic string, vs []any) ([]*store.Record, error) {
	if len(vs)%2 != 0 {
		return nil, errReply("records", vs)
	}
	out := make([]*store.Record, 0, len(vs)/2)
	for i := 0; i < len(vs); i += 2 {
		id, ok := vs[i].(string)
		if !ok {
			return nil, errReply("record id", vs[i])
		}
		r, err := decodeBlob(topic, id, vs[i+1])
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
			state = store.State(asInt(st.rest[0])).String() // #nosec G115 -- the state byte (r.st) the script returns, 0-255; only names the state in the error message
		}
		return fmt.Errorf("redisstore: %s: message %q in topic %q is %s or the receipt is stale: %w", op, id, topic, state, store.ErrConflict)
	default:
		return fmt.Errorf("redisstore: %s: unexpected status %q: %w", op, st.code, store.ErrCorrupt)
	}
}
