package redisstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// Operations that take "up to Max in order" from a topic (promote, lease,
// dead replay/delete) or from every topic (lease expiry, dedup purge) see
// several partitions. They first peek at the heads of the partitions'
// indexes (one pipelined read-only script each), merge the heads in Go by
// (priority, score, member) — priority counts for ready entries only, and
// member starts with ctr62 of Seq, whose byte order is numeric order, so
// this is (time, Seq) order within a topic and priority — and give each
// partition its share n of Max. Then
// each partition runs its atomic script on its own first n. Another server
// may move a head in between; the script then takes the next entries of
// its partition (never more than n, never one that is not due by its own
// check), so the only cost of a race is a slightly different choice.

// peekScript reads the head of one index.
//
//	KEYS[1]  the index (a ZSET of ctr62 .. id members)
//	ARGV[1]  now, ARGV[2] unused (message prefix)
//	ARGV[3]  upper bound of scores: "now" (the script's now), "+d" (d ms
//	         after it; d may be negative), a number, or "" for none;
//	         ARGV[4] max entries
//
// Returns {now, head score or "", member1, score1, member2, score2, …} in
// index order; the head is the first entry whatever its score.
var peekScript = libScript("peek", flagsRead, `
local bound, max = ARGV[3], tonumber(ARGV[4])
local r
if bound == '' then
  r = redis.call('ZRANGE', KEYS[1], 0, max - 1, 'WITHSCORES')
else
  if bound == 'now' then bound = NOW_S elseif string.byte(bound) == 43 then bound = istr(at(bound)) end
  r = redis.call('ZRANGE', KEYS[1], '-inf', bound, 'BYSCORE', 'LIMIT', 0, max, 'WITHSCORES')
end
local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
table.insert(r, 1, h[2] or '')
table.insert(r, 1, NOW)
return r
`)

// peekReadyScript reads the head of a partition's ready indexes in lease
// order: each priority's index in turn, lowest first, up to max entries
// in all.
//
//	KEYS[1-5] the partition's indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3]  upper bound of scores, as for peekScript; ARGV[4] max entries
//
// Returns {now, Redis TIME (ms), member1, score1, priority1, …}: the
// TIME bounds when the lease that follows may run (runby.go).
var peekReadyScript = libScript("peekReady", flagsRead, redisClockFn+`
local bound, max = ARGV[3], tonumber(ARGV[4])
if bound == 'now' then bound = NOW_S elseif bound ~= '' and string.byte(bound) == 43 then bound = istr(at(bound)) end
local out = {NOW, redisClock()}
for _, pri in ipairs(readyPrios()) do
  if max <= 0 then break end
  local r
  if bound == '' then
    r = redis.call('ZRANGE', rkey(pri), 0, max - 1, 'WITHSCORES')
  else
    r = redis.call('ZRANGE', rkey(pri), '-inf', bound, 'BYSCORE', 'LIMIT', 0, max, 'WITHSCORES')
  end
  for i = 1, #r, 2 do
    out[#out+1] = r[i]
    out[#out+1] = r[i+1]
    out[#out+1] = pri
    max = max - 1
  end
end
return out
`)

// cand is a head entry of an index: which target it came from, its
// priority (ready entries only; 0 otherwise), score and member.
type cand struct {
	src    int
	prio   uint8
	score  int64
	member string
}

func (c cand) id() string { return memberID(c.member) }

func compareCand(a, b cand) int {
	return cmp.Or(cmp.Compare(a.prio, b.prio), cmp.Compare(a.score, b.score), cmp.Compare(a.member, b.member))
}

// peekTarget is one index to peek at: the partition and which of its
// indexes (1-5, as KEYS of the partition scripts).
type peekTarget struct {
	k     *partKeys
	index int
}

// peekResult is what peek saw of each target.
type peekResult struct {
	per   [][]cand // entries within the bound, per target
	nows  []int64  // the now each script judged by
	heads []int64  // score of each target's first entry; 0 when empty (not ready targets)
	// clocks: Redis TIME (ms) when each ready target's peek ran (runby.go);
	// 0 for other targets. sent: when the peeks were sent.
	clocks []int64
	sent   time.Time
	errs   []error // why a target was not read (nil: it was); it has no entries
}

// err is the first target's error: for callers that need every target.
func (r *peekResult) err() error {
	for _, err := range r.errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// peek reads up to limit head entries of each target with scores up to
// bound ("" none, "now", "+d" after now, or a number). A target that does not answer (its
// Cluster master is down) has its error in errs and no entries, and the
// others are still read; callers that act on the answer go on without
// the target (see "Cluster" in the package doc) or fail with err(). The
// peek gets half the time left to the call: a master that hangs instead
// of refusing must leave time to act on the targets that did answer.
func (s *Store) peek(ctx context.Context, op string, targets []peekTarget, now, bound string, limit int) *peekResult {
	calls := make([]call, len(targets))
	stride := 2
	for i, t := range targets {
		if t.index == int(store.StateReady) {
			calls[i] = s.partCall(peekReadyScript, t.k, now, bound, limit)
			stride = 3
			continue
		}
		calls[i] = call{sc: peekScript, keys: []string{t.k.all()[t.index-1]}, args: []any{now, t.k.msgPrefix, bound, limit}}
	}
	return s.peekRun(ctx, op, calls, stride)
}

// peekRun runs peek scripts (calls) within half the time left to the
// call and reads their answers (readPeek).
func (s *Store) peekRun(ctx context.Context, op string, calls []call, stride int) *peekResult {
	var half time.Duration
	if dl, ok := ctx.Deadline(); ok {
		half = max(time.Until(dl)/2, time.Millisecond)
	}
	b := s.boundFor(ctx, half, boundPeek)
	defer b.stop()
	sent := time.Now()
	cmds, errs := s.runEach(b.ctx, op, calls)
	for i := range errs {
		errs[i] = b.wrap(errs[i])
	}
	r := readPeek(op, cmds, errs, stride)
	r.sent = sent
	return r
}

// readPeek reads peek answers: entries of stride 2 (member, score) or 3
// (member, score, priority; ready indexes).
func readPeek(op string, cmds []*redis.Cmd, errs []error, stride int) *peekResult {
	r := &peekResult{
		per:    make([][]cand, len(cmds)),
		nows:   make([]int64, len(cmds)),
		heads:  make([]int64, len(cmds)),
		clocks: make([]int64, len(cmds)),
		errs:   errs,
	}
	for i, cmd := range cmds {
		if errs[i] != nil {
			continue
		}
		a := asSlice(cmd.Val())
		if len(a) < 2 || (len(a)-2)%stride != 0 {
			errs[i] = errReply(op+": peek", cmd.Val())
			continue
		}
		r.nows[i] = asInt(a[0])
		if stride == 3 { // ready targets
			r.clocks[i] = asInt(a[1])
		} else {
			r.heads[i] = parseInt(asString(a[1]))
		}
		for j := 2; j < len(a); j += stride {
			c := cand{src: i, member: asString(a[j]), score: parseInt(asString(a[j+1]))}
			if stride == 3 {
				c.prio = uint8(asInt(a[j+2])) // #nosec G115 -- a priority the scripts stored from a uint8
			}
			r.per[i] = append(r.per[i], c)
		}
	}
	return r
}

// top merges the per-target heads and picks the max least, returning how
// many each target gave and the picked entries in order.
func top(per [][]cand, max int) ([]int, []cand) {
	var all []cand
	for _, p := range per {
		all = append(all, p...)
	}
	slices.SortFunc(all, compareCand)
	if len(all) > max {
		all = all[:max]
	}
	counts := make([]int, len(per))
	for _, c := range all {
		counts[c.src]++
	}
	return counts, all
}

// rankOf maps "topic\x00id" of picked entries to their merge rank, for
// returning records in merge order.
func rankOf(targets []peekTarget, picked []cand) map[string]int {
	m := make(map[string]int, len(picked))
	for i, c := range picked {
		m[targets[c.src].k.topic+"\x00"+c.id()] = i
	}
	return m
}
