package redisstore

import (
	"cmp"
	"context"
	"crypto/sha1" // #nosec G505 -- the script SHA-1 that EVALSHA/SCRIPT LOAD require, not a security hash
	"encoding/hex"
	"errors"
	"os"
	"slices"
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
//	KEYS[2] ready  ZSET  score DueAt,      member  "            (ready, priority 0)
//	KEYS[3] lease  ZSET  score LeaseUntil, member  "            (inflight)
//	KEYS[4] dead   ZSET  score DeadAt,     member  "            (dead)
//	KEYS[5] acked  ZSET  score AckedAt,    member  "            (acked tombstones)
//
// so KEYS[state] is the index of store.State state (for ready, that of
// priority 0: a ready message of priority p > 0 is in KEYS[2]..':'..p, and
// the ZSET KEYS[2]..':prios' lists the p > 0 whose index is not empty,
// score and member p; see rkey, addReady, remReady); and on these ARGV:
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
// A message key holds one STRING laid out as recHeader (codec.go) says;
// the prelude packs and unpacks it with its HDR format. A record in a
// script's answer is its bytes, or {prefix, the bytes before} when save
// rewrote only its prefix (recBytes splices them).
//
// Index members are ctr62(counter) .. id, where counter is the topic-local
// part of Seq and ctr62 an order-preserving encoding (a length digit, then
// base 62), so equal scores order by Seq and the member names the message.
// Scripts answer {now, …}; numbers they store go through istr (or the
// struct library) so Redis never sees a float.
//
// The prelude is in three parts, so that a function library (library.go)
// can define its helpers once and set the per-call state at each call:
// preludeState declares that state, preludeHelpers defines constants and
// functions (reading the state only when called), and preludeCall sets it.
const luaPrelude = preludeState + preludeHelpers + preludeCall

// preludeState is the prelude's per-call state: NOW is the script's clock
// (Unix ms), NOW_S the same as a string, IDX the partition's index keys
// and MPFX its message-key prefix.
const preludeState = `local NOW, NOW_S, IDX, MPFX
`

// preludeCall sets preludeState from KEYS and ARGV.
const preludeCall = `if ARGV[1] ~= '' then
  NOW = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
NOW_S, IDX, MPFX = istr(NOW), KEYS, ARGV[2]
`

// preludeHelpers are the prelude's constants and functions.
const preludeHelpers = `
local function istr(n) return string.format('%d', n) end
-- at resolves a time argument: '+d' is d ms after NOW (a duration the
-- engine sent, so the instant comes from this script's clock, not the
-- caller's), anything else an absolute Unix ms.
local function at(a)
  if string.byte(a) == 43 then return NOW + tonumber(string.sub(a, 2)) end
  return tonumber(a)
end
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
-- A message record (see decodeBlob and recHeader): st tn ctr due cat uat t
-- dlv fail max, then the priority byte pri only when st has bit PRI set
-- (pri > 0), then, when st has bit LAY set, the area: its size cap (4
-- bytes) and cap bytes holding rcpt and err (length-prefixed) and zero
-- padding; without LAY (records written before the area existed) rcpt and
-- err follow unpadded. Then h (length-prefixed) and the payload. t is
-- LeaseUntil when inflight, DeadAt when dead, AckedAt when acked, else 0.
-- rcpt is the lease's when inflight, the receipt that acked an acked
-- tombstone, and the failed delivery's after a nack or an expiry (until
-- the next lease); '' before the first lease, and in records written
-- before this rule that were not inflight.
local HDR = '>BI3I6i6i6i6i6i4i4i4'
local AREAF = '>I2c0I4c0'
local PRI, LAY = 128, 64
-- A new record's area holds a receipt of the engine's tokens (16 + '-' +
-- deliveries) beside "lease expired"; one that outgrows its area is
-- rewritten whole with RROOM bytes to spare, room for the next receipt.
-- Only records whose headers and payload take AREAMIN bytes or more get
-- an area: a smaller one is rewritten whole at about the cost of its
-- prefix, and the area's bytes would cost it more memory than it saves.
local AREA, RROOM, AREAMIN = 48, 34, 1024
-- parse reads b up to the headers: the record r, and where h starts.
local function parse(b)
  local r, pos = {pri = 0}, nil
  r.st, r.tn, r.ctr, r.due, r.cat, r.uat, r.t, r.dlv, r.fail, r.max, pos = struct.unpack(HDR, b)
  if r.st >= PRI then
    r.st = r.st - PRI
    r.pri, pos = struct.unpack('>B', b, pos)
  end
  if r.st >= LAY then
    r.st = r.st - LAY
    r.cap, pos = struct.unpack('>I4', b, pos)
    if #b < pos - 1 + r.cap then error('short area') end
    r.rcpt, r.err = struct.unpack(AREAF, b, pos)
    pos = pos + r.cap
  else
    r.rcpt, r.err, pos = struct.unpack(AREAF, b, pos)
  end
  return r, pos
end
-- load reads the whole record at k (nil if none); r.p, the payload, is
-- taken from r.b only if save rewrites the record whole.
local function load(k)
  local b = redis.call('GET', k)
  if not b then return nil end
  local r, pos = parse(b)
  r.h, r.ppos = struct.unpack('>I4c0', b, pos)
  r.b = b
  return r, b
end
-- loadHead reads the record at k up to its headers only (GETRANGE), for
-- a script that drops the payload: r has no h, p or b.
local function loadHead(k)
  local n = 128
  while true do
    local b = redis.call('GETRANGE', k, 0, n - 1)
    if b == '' then return nil end
    local ok, r = pcall(parse, b)
    if ok then return r end
    if #b < n then error(r) end -- the whole record, and still short
    n = n * 16
  end
end
-- prefix packs r's header and area (of size cap, area bytes a), or
-- without cap a header followed by a unpadded (no area, as format 2).
local function prefix(r, a, cap)
  local st, x = r.st, ''
  if cap then st = st + LAY end
  if (r.pri or 0) > 0 then st, x = st + PRI, struct.pack('>B', r.pri) end
  local head = struct.pack(HDR, st, r.tn, r.ctr, r.due, r.cat, r.uat, r.t, r.dlv, r.fail, r.max) .. x
  if not cap then return head .. a end
  return head .. struct.pack('>I4', cap) .. a .. string.rep('\0', cap - #a)
end
-- area is r's receipt and error as its area holds them.
local function area(r) return struct.pack(AREAF, #r.rcpt, r.rcpt, #r.err, r.err) end
-- whole is r written whole, a its area's bytes (area(r)).
local function whole(r, a)
  local p = r.p or string.sub(r.b, r.ppos)
  local cap
  if r.st ~= 5 and #r.h + #p >= AREAMIN then
    if #a <= AREA then cap = AREA else cap = #a + RROOM end
  end
  return prefix(r, a, cap) .. struct.pack('>I4', #r.h) .. r.h .. p
end
-- save writes r to k and returns the record for the script's answer.
-- A record load read whose receipt and error fit its area is rewritten
-- up to the area's end only (SETRANGE): the headers and payload are
-- neither copied into the script nor written again (nor to the AOF and
-- replicas), and the answer is {prefix, the bytes load read}, which the
-- client splices. Any other is written whole (SET) and answered as its
-- bytes: a new record, a record whose area is too small (it gets a larger
-- one, RROOM to spare), one without an area, and a tombstone. A record of
-- AREAMIN bytes of headers and payload or more gets an area, except a
-- tombstone (never leased again); the others none.
local function save(k, r)
  local a = area(r)
  if r.b and r.cap and #a <= r.cap then
    local head = prefix(r, a, r.cap)
    redis.call('SETRANGE', k, 0, head)
    return {head, r.b}
  end
  local b = whole(r, a)
  redis.call('SET', k, b)
  return b
end
local function member(r, id) return ctr62(r.ctr) .. id end
-- The ready index of priority pri (0: KEYS[2] itself, as before
-- priorities existed), and the ZSET of the priorities > 0 whose ready
-- index is not empty (score and member the priority).
local function prios() return IDX[2] .. ':prios' end
local function rkey(pri)
  if pri == 0 then return IDX[2] end
  return IDX[2] .. ':' .. istr(pri)
end
-- readyPrios lists the priorities that may have ready messages, in order.
local function readyPrios()
  local ps = {0}
  for _, p in ipairs(redis.call('ZRANGE', prios(), 0, -1)) do ps[#ps+1] = tonumber(p) end
  return ps
end
-- index adds member m of r to the index of r's state at score (a string);
-- unindex removes it. Only these touch the ready indexes and prios().
local function index(r, m, score)
  if r.st ~= 2 then
    redis.call('ZADD', IDX[r.st], score, m)
    return
  end
  local pri = r.pri or 0
  if pri > 0 then redis.call('ZADD', prios(), istr(pri), istr(pri)) end
  redis.call('ZADD', rkey(pri), score, m)
end
local function unindex(r, m)
  if r.st ~= 2 then
    redis.call('ZREM', IDX[r.st], m)
    return
  end
  local pri = r.pri or 0
  local k = rkey(pri)
  redis.call('ZREM', k, m)
  if pri > 0 and redis.call('EXISTS', k) == 0 then redis.call('ZREM', prios(), istr(pri)) end
end
-- takeLease moves the message of index member m (scheduled or ready,
-- and due) to inflight until lu (lus: the same as a string) under the
-- receipt token-deliveries, and appends its id and record to out; false
-- when its record is gone, so the caller drops the stale member.
local function takeLease(m, lu, lus, token, out)
  local id = idof(m)
  local k = mkey(id)
  local r = load(k)
  if not r then return false end
  unindex(r, m)
  r.dlv = r.dlv + 1
  r.st, r.t, r.rcpt, r.uat = 3, lu, token .. '-' .. istr(r.dlv), NOW
  redis.call('ZADD', IDX[3], lus, m)
  out[#out+1] = id
  out[#out+1] = save(k, r)
  return true
end
-- leased loads k (with ld: load, or loadHead) and checks that it is
-- inflight under receipt: 'ok' | 'nf' | 'conflict', the state, and the
-- record.
local function leased(k, receipt, ld)
  local r = ld(k)
  if not r then return 'nf', 0 end
  if r.st ~= 3 or r.rcpt ~= receipt then return 'conflict', r.st end
  return 'ok', r.st, r
end
-- fail counts a failure of the inflight record r (member m, already out
-- of the lease index) and sends it to dead, or back at retry (a number).
local function fail(r, m, retry, reason, final)
  r.fail = r.fail + 1
  r.err, r.uat, r.t = reason, NOW, 0 -- rcpt stays: the failed delivery's
  if final or r.fail >= r.max then
    r.st, r.t = 4, NOW
    redis.call('ZADD', IDX[4], NOW_S, m)
  elseif retry <= NOW then
    r.st, r.due = 2, retry
    index(r, m, istr(retry))
  else
    r.st, r.due = 1, retry
    index(r, m, istr(retry))
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

// script is a Lua script and its SHA-1, run through noRetry commands;
// fn is its function in delayq's library (library.go), "" when it is not
// in it.
type script struct {
	src, sha string
	fn       string
	name     string // fn without the library's prefix
	flags    string // the shebang: flagsGrow, flagsState or flagsRead
	body     string // src after the shebang and the prelude
}

// newScript is body after flags and the prelude, a script outside the
// function library (the store's own are made by libScript).
func newScript(flags, body string) *script {
	sc := scriptOf(flags + luaPrelude + body)
	sc.flags, sc.body = flags, body
	return sc
}

// scriptOf is the script src exactly as given.
func scriptOf(src string) *script {
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

// sendAs is how a script call is sent.
type sendAs int

const (
	asFunction sendAs = iota // FCALL of its function in delayq's library
	asSHA                    // EVALSHA
	asSource                 // EVAL
)

// cmd builds FCALL, EVALSHA or EVAL of the script.
func (sc *script) cmd(ctx context.Context, as sendAs, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	switch as {
	case asFunction:
		a = append(a, "fcall", sc.fn)
	case asSHA:
		a = append(a, "evalsha", sc.sha)
	default:
		a = append(a, "eval", sc.src)
	}
	a = append(a, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
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
// Cluster) as functions (FCALL; EVALSHA where functions are refused),
// re-running any that found its function or script missing (a restarted
// Redis without persistence, a flush): such a call did not run. No call
// is ever resent otherwise (noRetry). extra adds plain commands to the same
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
	if perr != nil && !isMissing(perr) && !errors.Is(perr, redis.Nil) {
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
// there is one call and no extra, and re-runs those that found their
// function or script missing (rerunMissing). Each call's outcome is in its
// Cmd; the error is the pipeline's.
func (s *Store) exec(ctx context.Context, calls []call, extra func(redis.Pipeliner)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 && extra == nil {
		c := calls[0]
		cmds[0] = c.sc.cmd(ctx, s.sendAs(c.sc), c.keys, c.args)
		_ = s.rdb.Process(ctx, noRetry{cmds[0]})
		s.rerunMissing(ctx, calls, cmds)
		return cmds, nil
	}
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.sc.cmd(ctx, s.sendAs(c.sc), c.keys, c.args)
		_ = pipe.Process(ctx, noRetry{cmds[i]})
	}
	if extra != nil {
		extra(pipe)
	}
	_, perr := pipe.Exec(ctx)
	s.rerunMissing(ctx, calls, cmds)
	return cmds, perr
}

// sendAs is how sc is sent first: as its function unless it has none or
// the server refuses functions (Store.scriptsOnly), else by SHA.
func (s *Store) sendAs(sc *script) sendAs {
	if sc.fn != "" && !s.scriptsOnly.Load() {
		return asFunction
	}
	return asSHA
}

// maxLibraryLoads bounds how often one rerunMissing loads the library
// on a server that keeps answering that a function is missing (someone
// flushing functions in a loop): the calls then fail with that answer.
const maxLibraryLoads = 3

// rerunMissing re-runs the calls that found their function or script
// missing (a restarted or flushed Redis: the call did not run), in
// pipelines rather than one round trip each, so that the first sweep
// after a restart is not O(topics × partitions) round trips. A missing
// function first has the library loaded on its server, once per server
// (loadLibrary); if the server refuses functions, that call and every
// later one is sent as a script. A missing script is sent whole (EVAL)
// once per script in each pipeline and by SHA in the rest; on a Cluster
// those on a server the EVAL did not reach answer NOSCRIPT again and go
// to the next pipeline, which is smaller by at least one call per script,
// so this ends. Each call is still sent at most once per missing answer.
func (s *Store) rerunMissing(ctx context.Context, calls []call, cmds []*redis.Cmd) {
	if !slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return isMissing(c.Err()) }) {
		return // every call ran (or failed for itself): the common case
	}
	loads := 0
	asScript := map[int]bool{} // calls sent as scripts: the library did not load
	for {
		var redo []int
		loaded := map[string]error{} // servers (serverOf) the library was loaded on in this round, and how
		for i, c := range calls {
			err := cmds[i].Err()
			switch {
			case isNoScript(err):
				redo = append(redo, i)
			case isFunctionRefused(err):
				s.refuseFunctions(err)
				redo = append(redo, i)
			case isNoFunction(err) && loads < maxLibraryLoads:
				server, host, herr := s.libraryHost(ctx, c.keys)
				lerr, tried := loaded[server]
				if !tried {
					lerr = herr
					if lerr == nil {
						lerr = s.loadLibrary(ctx, host)
					}
					loaded[server] = lerr
					if lerr != nil && logTurn(&s.libLogAt) {
						s.log.Warn("redisstore: the function library did not load; sending the calls as scripts", "err", lerr)
					}
				}
				if lerr != nil {
					// Sent as a script (EVAL): the library may not load
					// where a script still runs (at maxmemory FUNCTION
					// LOAD is refused, a script that allows OOM is not),
					// and where Redis is gone that fails too.
					asScript[i] = true
				}
				redo = append(redo, i)
			}
		}
		if len(loaded) > 0 {
			loads++
		}
		if len(redo) == 0 {
			return
		}
		evaled := map[*script]bool{}
		next := func(i int) *redis.Cmd {
			c := calls[i]
			as := s.sendAs(c.sc)
			if asScript[i] {
				as = asSHA
			}
			if as == asSHA && !evaled[c.sc] {
				as = asSource
				evaled[c.sc] = true
			}
			return c.sc.cmd(ctx, as, c.keys, c.args)
		}
		if len(redo) == 1 {
			i := redo[0]
			cmds[i] = next(i)
			_ = s.rdb.Process(ctx, noRetry{cmds[i]})
			continue
		}
		pipe := s.rdb.Pipeline()
		for _, i := range redo {
			cmds[i] = next(i)
			_ = pipe.Process(ctx, noRetry{cmds[i]})
		}
		if _, err := pipe.Exec(ctx); err != nil && !isMissing(err) {
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

// isMissing: the call did not run because its script or function is not
// on the server.
func isMissing(err error) bool {
	return isNoScript(err) || isNoFunction(err) || isFunctionRefused(err)
}
