package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// promoteFn is the promotion of one record, shared by promoteScript and
// promoteAllScript. promoteRec(k) makes the scheduled record k ready as of
// NOW and returns its priority, or nil when k does not exist. It reads
// and rewrites only the record's fixed header (GETRANGE, SETRANGE of its
// first 28 bytes: state through UpdatedAt), never the payload: a
// promotion changes nothing else, and a whole-record GET and SET would
// copy the payload into Lua and back, and send all of it to the AOF and
// the replicas. The bytes it leaves are those save would write (the
// priority and area bits of the state byte kept), in the record's layout.
// A record is at least recHeader + 10 bytes, so the 47 read always cover
// the priority byte when there is one.
const promoteFn = `
local function promoteRec(k)
  local h = redis.call('GETRANGE', k, 0, 46)
  if #h < 47 then return nil end
  local st = string.byte(h, 1)
  local pri = 0
  if st >= PRI then pri = string.byte(h, 47) end
  redis.call('SETRANGE', k, 0, string.char(st - st % LAY + 2) .. string.sub(h, 2, 22) .. struct.pack('>i6', NOW))
  return pri
end
`

// promoteScript moves the partition's first n scheduled messages due by
// now − grace to ready (R4: in the store, atomically, whoever runs it).
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix, ARGV[3] n
//	ARGV[4] the notification channel, ARGV[5] the topic, ARGV[6] grace (ms)
//
// Returns {now, promoted, head, after}: head is the score of the first
// message still scheduled, after that of the first due after now (equal
// to head when head is after now; "0": none). Due means score <= now −
// grace, so nothing is promoted early by the script's clock. When it
// promoted any, it publishes "topic\t0" (ready now) itself: other servers
// armed the same due time, and whichever promotes first must wake their
// long-polls too, or they sleep until the sweep.
var promoteScript = libScript("promote", flagsState, promoteFn+`
local n = tonumber(ARGV[3])
local done = 0
if n > 0 then
  local ms = redis.call('ZRANGE', IDX[1], '-inf', istr(NOW - tonumber(ARGV[6])), 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
  for i = 1, #ms, 2 do
    local m, due = ms[i], ms[i+1]
    local pri = promoteRec(mkey(idof(m)))
    redis.call('ZREM', IDX[1], m)
    if pri then -- (a member always has its message; never recreate one half)
      index({st = 2, pri = pri}, m, due)
    end
  end
  done = #ms / 2
end
if done > 0 then redis.call('PUBLISH', ARGV[4], ARGV[5] .. '\t0') end
local h = redis.call('ZRANGE', IDX[1], 0, 0, 'WITHSCORES')
local head = h[2] or '0'
local after = head
if h[2] and tonumber(h[2]) <= NOW then
  local a = redis.call('ZRANGE', IDX[1], '(' .. NOW_S, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  after = a[2] or '0'
end
return {NOW, done, head, after}
`)

// MessagePromote implements store.Store: it peeks at the due heads of
// the topic's partitions, merges them in (DueAt, Seq) order and promotes
// each partition's share of the first Max (see merge.go). Atomic per
// partition. PromoteResult.Now is the time the scripts judged by: Redis
// TIME (that of the partition holding NextDue), or 0 (Params.Now) with
// TimeCaller.
//
// A partition that fails (its Cluster master is down) is left out and the
// others are promoted. The call fails only when every partition failed.
// Otherwise NextDue comes from the partitions that answered, but no later
// than partRetry after Now, so that the engine, which sleeps until
// NextDue, comes back for the failed partition within partRetry as it
// would after an error — while the healthy partitions keep their own,
// possibly earlier, due times.
func (s *Store) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (_ *store.PromoteResult, err error) {
	return s.promote(ctx, p, 0)
}

// MessagePromoteGrace implements store.DueLeaser: MessagePromote of the
// messages due by now − grace (Redis TIME), leaving those due since to
// the long-polls the engine woke, whose MessageLeaseDue takes them. A
// script holds nothing between calls, so it is never Busy.
func (s *Store) MessagePromoteGrace(ctx context.Context, p *store.MessagePromoteParams, grace int64) (_ *store.PromoteResult, err error) {
	return s.promote(ctx, p, max(grace, 0))
}

// partDue is what one partition's promotion left: its now, the first
// scheduled score (head) and the first after now (after); 0: none.
type partDue struct{ now, head, after int64 }

// split classifies a partition's heads for MessagePromoteGrace: a head
// due by now − grace is still to promote (Max cut the call short, or a
// race): NextDue, so that the engine promotes again at once; one due by
// now is held for the leases (HeldDue), and NextDue is the first after
// now; a later head is NextDue. With grace 0 this is MessagePromote's
// NextDue, the first scheduled score.
func (d partDue) split(grace int64) (next, held int64) {
	switch {
	case d.head == 0 || d.head > d.now || d.head <= d.now-grace:
		return d.head, 0
	default:
		return d.after, d.head
	}
}

func (s *Store) promote(ctx context.Context, p *store.MessagePromoteParams, grace int64) (_ *store.PromoteResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	parts := newPartFailures(s, ctx, "promote")
	ctx, end := s.bound(ctx, 1) // peek, promote
	defer end(&err)
	if err := checkTopic(p.Topic); err != nil {
		return nil, err
	}
	res := &store.PromoteResult{}
	if p.Max <= 0 {
		return res, nil
	}
	if s.oneServer {
		return s.promoteOneServer(ctx, p, grace)
	}
	ks := s.keys.allParts(p.Topic)
	parts.keys, parts.down = ks, make([]bool, len(ks))
	targets := make([]peekTarget, len(ks))
	for i, k := range ks {
		targets[i] = peekTarget{k: k, index: int(store.StateScheduled)}
	}
	now := s.nowArg(p.Now)
	bound := "now"
	if grace > 0 {
		bound = fmt.Sprintf("+%d", -grace)
	}
	pk := s.peek(ctx, "promote", targets, now, bound, p.Max)
	for i, err := range pk.errs {
		parts.fail(i, err)
	}
	counts, _ := top(pk.per, p.Max)
	dues := make([]partDue, len(ks))
	var calls []call
	var callPart []int
	for i, n := range counts {
		dues[i] = partDue{now: pk.nows[i], head: pk.heads[i], after: pk.heads[i]}
		// A partition with a head held for the leases is asked too (with
		// nothing to promote), for its first message due after now.
		held := pk.errs[i] == nil && pk.heads[i] != 0 && pk.heads[i] <= pk.nows[i] && pk.heads[i] > pk.nows[i]-grace
		if n > 0 || held {
			calls = append(calls, s.partCall(promoteScript, ks[i], now, n, s.keys.channel(), p.Topic, grace))
			callPart = append(callPart, i)
		}
	}
	cmds, errs := s.runEach(ctx, "promote", calls)
	for c, cmd := range cmds {
		i := callPart[c]
		if errs[c] != nil {
			parts.fail(i, errs[c])
			continue
		}
		a := asSlice(cmd.Val())
		if len(a) != 4 {
			parts.fail(i, errReply("promote", cmd.Val()))
			continue
		}
		res.Promoted += int(asInt(a[1]))
		dues[i] = partDue{now: asInt(a[0]), head: parseInt(asString(a[2])), after: parseInt(asString(a[3]))}
	}
	base := -1 // the first partition that answered: its now is the call's
	var heldNow int64
	for i := range ks {
		if parts.down[i] {
			continue
		}
		if base < 0 {
			base = i
		}
		next, held := dues[i].split(grace)
		if next != 0 && (res.NextDue == 0 || next < res.NextDue) {
			res.NextDue, res.Now = next, dues[i].now
		}
		if held != 0 && (res.HeldDue == 0 || held < res.HeldDue) {
			res.HeldDue, heldNow = held, dues[i].now
		}
	}
	if base < 0 {
		return nil, parts.first
	}
	if res.NextDue == 0 {
		res.Now = cmp.Or(heldNow, dues[base].now)
	}
	if parts.any() {
		// The failed partitions' heads are unknown (or, after a failed
		// script, stale): retry them soon, judged by a clock that answered.
		nowB := dues[base].now
		if retry := nowB + partRetry.Milliseconds(); res.NextDue == 0 || retry-nowB < res.NextDue-res.Now {
			res.NextDue, res.Now = retry, nowB
		}
	}
	if s.callerNow {
		res.Now = 0 // "judged by Params.Now"
	}
	return res, nil
}

// partRetry is how soon the engine is asked (through NextDue) to promote
// again when some partition could not be reached: the engine's own retry
// delay after a failed promotion.
const partRetry = time.Second
