package redisstore

import (
	"context"
	"math"
	"slices"
	"strconv"

	"github.com/delayq/delayq/internal/store"
)

// listPageScript reads a partition's messages of one state after a
// cursor position, in (score, Seq) order — for ready, (priority, score,
// Seq), each priority's index in turn: ZRANGE BYSCORE on the state's
// index, never a scan of the partition.
//
//	KEYS[1-5] indexes; ARGV[1] now, ARGV[2] message prefix
//	ARGV[3] limit, ARGV[4] cursor score ("" from the start),
//	ARGV[5] cursor Seq's counter as ctr62 (member order),
//	ARGV[6] index (1-4), ARGV[7] lowest score ("-inf" or a number),
//	ARGV[8] highest score ("+inf" or "(n", exclusive),
//	ARGV[9] cursor priority (ready only; 0 otherwise)
//
// Returns {now, member1, score1, priority1, rec1, …}, at most limit
// entries.
var listPageScript = libScript("listPage", flagsRead, `
local lim = tonumber(ARGV[3])
local ix = tonumber(ARGV[6])
local cpri = tonumber(ARGV[9])
local pris, keys = {0}, {IDX[ix]}
if ix == 2 then
  pris = readyPrios()
  for j, pri in ipairs(pris) do keys[j] = rkey(pri) end
end
local out = {NOW}
local got = 0
for j, key in ipairs(keys) do
  local pri = pris[j]
  if got >= lim then break end
  if pri >= cpri then
    local cs
    if pri == cpri then cs = tonumber(ARGV[4]) end
    local min, max = ARGV[7], ARGV[8]
    if cs and (min == '-inf' or cs > tonumber(min)) then min = ARGV[4] end
    local off = 0
    while got < lim do
      local r = redis.call('ZRANGE', key, min, max, 'BYSCORE', 'LIMIT', off, lim, 'WITHSCORES')
      if #r == 0 then break end
      for i = 1, #r, 2 do
        local m, sc = r[i], r[i+1]
        if got < lim and (cs == nil or tonumber(sc) > cs or seqof(m) > ARGV[5]) then
          local b = redis.call('GET', mkey(idof(m)))
          if b then
            out[#out+1] = m
            out[#out+1] = sc
            out[#out+1] = pri
            out[#out+1] = b
            got = got + 1
          end
        end
      end
      off = off + #r / 2
    end
  end
end
return out
`)

// MessageList implements store.Store. Each partition answers Limit+1
// entries after the cursor; the merge keeps the first Limit and knows
// from the extra one whether a next page exists.
func (s *Store) MessageList(ctx context.Context, p *store.MessageListParams) ([]*store.Record, string, error) {
	if err := s.check(); err != nil {
		return nil, "", err
	}
	if err := checkTopic(p.Topic); err != nil {
		return nil, "", err
	}
	curAt, curSeq, curPrio := "", "", 0
	if p.Cursor != "" {
		pos, err := store.ParseListCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		curAt, curSeq = strconv.FormatInt(pos.Key, 10), ctr62(pos.Seq&maxCtr)
		if p.State == store.StateReady {
			curPrio = int(pos.Priority)
		}
	}
	ix := slices.Index([]store.State{store.StateScheduled, store.StateReady, store.StateInflight, store.StateDead}, p.State) + 1
	if ix == 0 || p.Limit <= 0 {
		return nil, "", nil
	}
	lo, hi := "-inf", "+inf"
	if ix <= 2 {
		if p.DueFrom != math.MinInt64 {
			lo = strconv.FormatInt(p.DueFrom, 10)
		}
		if p.DueTo != math.MaxInt64 {
			hi = "(" + strconv.FormatInt(p.DueTo, 10)
		}
	}
	ks := s.keys.allParts(p.Topic)
	calls := make([]call, len(ks))
	for i, k := range ks {
		calls[i] = s.partCall(listPageScript, k, "", p.Limit+1, curAt, curSeq, ix, lo, hi, curPrio)
	}
	cmds, err := s.run(ctx, "list messages", calls, nil)
	if err != nil {
		return nil, "", err
	}
	type item struct {
		c   cand
		rec any
	}
	var items []item
	for i, cmd := range cmds {
		a := asSlice(cmd.Val())
		if len(a)%4 != 1 {
			return nil, "", errReply("list messages", cmd.Val())
		}
		for j := 1; j < len(a); j += 4 {
			c := cand{src: i, member: asString(a[j]), score: parseInt(asString(a[j+1])), prio: uint8(asInt(a[j+2]))} // #nosec G115 -- a priority the scripts stored from a uint8
			items = append(items, item{c: c, rec: a[j+3]})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return compareCand(a.c, b.c) })
	more := len(items) > p.Limit
	if more {
		items = items[:p.Limit]
	}
	out := make([]*store.Record, 0, len(items))
	for _, it := range items {
		r, err := decodeBlob(p.Topic, it.c.id(), it.rec)
		if err != nil {
			return nil, "", err
		}
		out = append(out, r)
	}
	next := ""
	if more && len(out) > 0 {
		next = store.ListCursor(out[len(out)-1])
	}
	return out, next, nil
}
