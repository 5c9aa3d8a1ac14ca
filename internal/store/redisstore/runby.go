package redisstore

import (
	"context"
	"strconv"
	"time"
)

// A lease is a read-only peek and then the lease script, sent only once
// the peek has answered: a script sent to a frozen Redis (SIGSTOP, a
// stalled host) would wait in the socket and run when Redis resumes, long
// after its caller gave up, leasing messages to nobody until that lease
// expires. The peek alone leaves a window: Redis can stop after answering
// it and before reading the script, which then runs on resume all the
// same (S11's freeze: what came due during it delivered a lease length
// late). So the peek also answers Redis's TIME, and the script carries a
// "run by" instant on that clock: the peek's TIME plus the time its caller
// had left when it sent the peek. The peek ran after it was sent, so that
// instant is no earlier than the caller's deadline: no lease whose answer
// the caller could still read is refused (a bound taken from the peek's
// answer instead refused such leases under load, when answers came back
// slowly). A script that Redis reads after a stall longer than the time
// the call had left plus the peek's round trip leases nothing and fails;
// one that runs between the deadline and that instant, or just before
// the deadline with its answer arriving after, is the ambiguity of any
// timeout, as before. Only Redis's own clock is compared with itself
// (whatever Options.TimeSource says), so the caller's clock and its skew
// play no part; a freeze moves TIME on like any other wall clock. On a
// Cluster each master's TIME anchors its own scripts.

// redisClockFn is a Lua function giving Redis TIME in Unix ms, whatever
// NOW is (NOW is the caller's with TimeCaller).
const redisClockFn = `
local function redisClock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// runByCheck fails a lease script run after its "run by" instant (RUNBY,
// Redis TIME in ms; "" none), before it reads or writes anything.
const runByCheck = `
if RUNBY ~= '' and redisClock() > tonumber(RUNBY) then
  return redis.error_reply('LATE lease script ran after its run-by time: its caller has given up')
end
`

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
