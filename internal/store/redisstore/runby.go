package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Without a Redis TIME kept (below), a lease is a read-only peek and then
// the lease script, sent only once the peek has answered: a script sent to
// a frozen Redis (SIGSTOP, a stalled host) would wait in the socket and
// run when Redis resumes, long after its caller gave up, leasing messages
// to nobody until that lease expires. The peek alone leaves a window:
// Redis can stop after answering it and before reading the script, which
// then runs on resume all the same (S11's freeze: what came due during it
// delivered a lease length late). So the peek also answers Redis's TIME,
// and the script carries a "run by" instant on that clock: the peek's TIME
// plus the time its caller had left when it sent the peek. The peek ran
// after it was sent, so that instant is no earlier than the caller's
// deadline: no lease whose answer the caller could still read is refused
// (a bound taken from the peek's answer instead refused such leases under
// load, when answers came back slowly). A script that Redis reads after a
// stall longer than the time the call had left plus the peek's round trip
// leases nothing and fails; one that runs between the deadline and that
// instant, or just before the deadline with its answer arriving after, is
// the ambiguity of any timeout, as before. Only Redis's own clock is
// compared with itself (whatever Options.TimeSource says), so the caller's
// clock and its skew play no part; a freeze moves TIME on like any other
// wall clock. On a Cluster each master's TIME anchors its own scripts.

// redisClockFn is a Lua function giving Redis TIME in Unix ms, whatever
// NOW is (NOW is the caller's with TimeCaller). When the prelude took NOW
// from TIME it is that, without another call.
const redisClockFn = `
local function redisClock()
  if ARGV[1] == '' then return NOW end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// runByCheck fails a lease script run after its "run by" instant (RUNBY,
// Redis TIME in ms; "" none), before it reads or writes anything. CLOCK
// is Redis TIME (ms) as the script started, which a single server's lease
// answers (clockSeen).
const runByCheck = `
local CLOCK = redisClock()
if RUNBY ~= '' and CLOCK > tonumber(RUNBY) then
  return redis.error_reply('` + lateReply + `')
end
`

// lateReply is the error a lease script answers when it ran after its
// run-by time.
const lateReply = "LATE lease script ran after its run-by time: its caller has given up"

// isLate reports whether err is a lease script's lateReply: it ran after
// its run-by time and did nothing.
func isLate(err error) bool {
	return err != nil && strings.Contains(err.Error(), "LATE lease script ran after its run-by time")
}

// runBy is the lease script's "run by" argument: clock (Redis TIME in ms
// when a peek ran; 0: unknown) plus the time ctx had left when the peek
// was sent (sent). "" (no limit) when ctx has no deadline: the caller then
// waits for any answer.
func runBy(ctx context.Context, clock int64, sent time.Time) string {
	dl, ok := ctx.Deadline()
	if !ok || clock == 0 || sent.IsZero() {
		return ""
	}
	left := max(dl.Sub(sent), 0)
	return strconv.FormatInt(clock+left.Milliseconds(), 10)
}

// On a single server a lease with a recent Redis TIME at hand (clockSeen:
// the last lease's or peek's, its round trip short) sends its script at
// once, without the peek: its run-by instant comes from that TIME instead
// (runBySeen), and a script that finds nothing to take costs Redis about
// what the peek did. That is a round trip and a script less per lease.
//
// The instant is a lower bound of Redis's clock at the caller's deadline:
// TIME was read before its answer arrived (got), so Redis's clock at the
// deadline is at least TIME + (deadline − got). A script Redis runs after
// the caller gave up is always refused, whether Redis froze before or
// after reading it; one that runs in the last moments before the
// deadline (up to the earlier call's TIME-to-answer time, at most
// maxClockRTT) may be refused too, and the lease then peeks and tries
// again if time is left. What it assumes: Redis's clock runs at the
// rate of ours over clockFresh. A step of Redis's clock forward makes
// scripts refused (the refusal drops the TIME kept, so the next lease
// peeks); a step back makes the bound late by the step, as a step
// between a peek and its script would.
const (
	clockFresh  = time.Second
	maxClockRTT = 50 * time.Millisecond
)

// clockSeen is Redis TIME (ms) read by a script whose answer arrived at
// got (which carries the monotonic clock).
type clockSeen struct {
	redis int64
	got   time.Time
}

// sawClock keeps a Redis TIME a lease or peek answered, if its round trip
// was short enough to bound a lease's run-by time closely.
func (s *Store) sawClock(redisMS int64, sent, got time.Time) {
	if redisMS <= 0 || got.Sub(sent) > maxClockRTT {
		return
	}
	s.clock.Store(&clockSeen{redis: redisMS, got: got})
}

// runBySeen is a lease script's run-by argument from the TIME kept (see
// above), ok false when there is none recent enough: the lease then
// peeks first. It peeks too when ctx has no deadline (no Timeout): only
// the peek keeps a script from going out to a frozen Redis when the
// caller may still give up by cancelling.
func (s *Store) runBySeen(ctx context.Context) (string, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return "", false
	}
	o := s.clock.Load()
	if o == nil || time.Since(o.got) > clockFresh {
		return "", false
	}
	// Less 1 ms: TIME is whole ms, so a script run just after the
	// deadline could otherwise read the bound itself and pass.
	return strconv.FormatInt(o.redis+dl.Sub(o.got).Milliseconds()-1, 10), true
}
