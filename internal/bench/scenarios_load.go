package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// runPaced is production's steady shape: c.Concurrency producers send
// c.N messages at c.Rate in total, each due c.Lead after its send, so
// messages come due, are leased and acked while the sends go on.
func runPaced(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	per := float64(c.Batch) / c.Rate
	start := time.Now()
	sp := sendPlan{n: c.N, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed),
		at:  func(b int) time.Time { return start.Add(time.Duration(float64(b) * per * float64(time.Second))) },
		due: func(_ uint64, now time.Time) time.Time { return msTrunc(now.Add(c.Lead)) }}
	r, err := runWhileSending(ctx, c, t, p, sp, start)
	if err == nil {
		if r.Values["send_msgs_per_s"] < 0.9*c.Rate {
			r.Notes = append(r.Notes, fmt.Sprintf("sent at %.0f msgs/s of the %g asked for: the producers could not keep the pace", r.Values["send_msgs_per_s"], c.Rate))
		}
	}
	return r, err
}

// runBurst is everyone sending at once: c.N single sends from
// c.Concurrency callers as fast as they go (or at c.Rate), with delays
// uniform in [0, c.MaxDelay], so the first ones come due while the burst
// is still being accepted.
func runBurst(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6275727374)) // #nosec G404 -- seeded benchmark workload, reproducible on purpose
	delays := make([]time.Duration, c.N)
	for i := range delays {
		delays[i] = time.Duration(rng.Int64N(int64(c.MaxDelay) + 1))
	}
	start := time.Now()
	sp := sendPlan{n: c.N, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed),
		due: func(seq uint64, now time.Time) time.Time { return msTrunc(now.Add(delays[seq])) }}
	if c.Rate > 0 {
		per := float64(c.Batch) / c.Rate
		sp.at = func(b int) time.Time { return start.Add(time.Duration(float64(b) * per * float64(time.Second))) }
	}
	return runWhileSending(ctx, c, t, p, sp, start)
}

// runWhileSending runs sp while c.Consumers consume, and checks every
// message sent: lateness against max(due, accepted), early, duplicates,
// missing. It ends when every message was received, or nothing new came
// for c.Grace after the sends ended and the last one was due.
func runWhileSending(ctx context.Context, c Config, t Target, p *Progress, sp sendPlan, start time.Time) (RunResult, error) {
	var r RunResult
	ck := NewChecker(sp.n)
	ck.TraceLate(c.LateTrace)
	var lastDue atomic.Int64 // Unix ns: the latest due (or acceptance) of what was sent
	var sendsDone atomic.Bool
	sp.onSent = func(msgs []Msg, done time.Time) {
		for _, m := range msgs {
			ck.SetDue(m.Seq, m.DeliverAt)
			ck.Accepted(m.Seq, done)
			at := max(m.DeliverAt.UnixNano(), done.UnixNano())
			for {
				cur := lastDue.Load()
				if at <= cur || lastDue.CompareAndSwap(cur, at) {
					break
				}
			}
		}
	}
	// The stall clock starts only once every send returned: a slow sender
	// is not a stalled consumer.
	stallFrom := func() time.Time {
		if !sendsDone.Load() {
			return time.Unix(0, math.MaxInt64)
		}
		return time.Unix(0, lastDue.Load())
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.Phase("send + release", int64(sp.n))
	consumed := make(chan error, 1)
	go func() {
		consumed <- consumeUntilFn(cctx, t, c.consumeOptions(), ck, p,
			func() bool { return ck.Unique() >= int64(sp.n) }, stallFrom, c.Grace)
	}()
	h, err := sp.run(cctx, t)
	sendEl := time.Since(start)
	sendsDone.Store(true)
	if err != nil {
		cancel()
		<-consumed
		return r, err
	}
	if err := <-consumed; err != nil {
		return r, err
	}
	res := ck.Result(nil)
	r.set("send_msgs_per_s", float64(sp.n)/sendEl.Seconds())
	r.set("send_call_p99_ms", float64(h.Quantile(0.99))/1000)
	r.set("checked", float64(res.Expected))
	r.setLateness(res)
	r.Msgs = int64(sp.n)
	return r, nil
}
