package engine

import (
	"context"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// A shared store (Redis) judges every instant by its own clock: due times,
// lease ends and retry times are computed there (the engine sends
// durations), and a message is never released before its due time by that
// clock. The engine's timers still run on this server's clock, so it keeps
// an estimate of the offset between the two and arms each timer at the
// local instant that corresponds to the store's one. Without it, a server
// whose clock lags the store's by d wakes d late for every message, and one
// whose clock runs ahead wakes early, finds nothing due, and spins.
//
// The estimate comes from reading the store's time (store.Clock) and from
// the time promotions report (PromoteResult.Now), NTP-style: offset =
// store time - the midpoint of the call, trusting calls with the smallest
// round trip. Its error is at most half a round trip (well under a
// millisecond on a LAN), and a wrong estimate only costs a wasted early
// wake-up (promotion then sleeps NextDue - the store's now, measured by
// the store) or that error in lateness — never an early release.

// clockSyncEvery is how often the offset is re-measured (with the safety
// sweep); samples also arrive with every promotion.
const (
	clockSamples = 3
	// A sample replaces the estimate when its round trip is within
	// rttSlack of the estimate's. The allowance doubles for every
	// estimateMaxAge the estimate has aged, so drift, a stepped clock or a
	// failover to another master is still picked up on a loaded machine
	// where no call comes near the best round trip again, while a call
	// that spanned an outage (a round trip of seconds, hence an offset
	// wrong by half of it) never replaces a recent estimate: it would aim
	// every timer that far off.
	rttSlackMicros = 2000
	estimateMaxAge = 30 * time.Second
)

// allowedRTT is the longest round trip (µs) a sample may have to replace an
// estimate measured with round trip rtt, age ago.
func allowedRTT(rtt int64, age time.Duration) int64 {
	return rtt + rttSlackMicros<<min(age/estimateMaxAge, 20)
}

type storeClock struct {
	mu     sync.Mutex
	offset int64 // store time - local time, ms
	rtt    int64 // round trip of the sample behind offset, µs
	at     time.Time
	has    bool
}

// sample records that the store read storeNow (ms) during a call that ran
// from sent to recv by the local clock.
func (c *storeClock) sample(storeNow int64, sent, recv time.Time) {
	if storeNow == 0 {
		return // the store judged by the caller's clock
	}
	rtt := recv.Sub(sent).Microseconds()
	mid := sent.UnixMicro() + rtt/2
	off := storeNow - mid/1000
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.has && rtt > allowedRTT(c.rtt, recv.Sub(c.at)) {
		return
	}
	c.offset, c.rtt, c.at, c.has = off, rtt, recv, true
}

func (c *storeClock) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// storeNow is the engine's estimate of the store's time (Unix ms); engine
// time on stores without a clock of their own.
func (e *Engine) storeNow() int64 { return e.now() + e.skew.get() }

// local converts an instant of the store's clock to this server's clock,
// for arming timers.
func (e *Engine) local(storeMS int64) int64 { return storeMS - e.skew.get() }

// syncClock measures the offset to the store's clock, keeping the sample
// with the shortest round trip. Stores that judge time by the caller's
// clock are left alone (offset 0).
func (e *Engine) syncClock(ctx context.Context) error {
	c, ok := e.st.(store.Clock)
	if !ok {
		return nil
	}
	var best struct {
		now        int64
		sent, recv time.Time
	}
	for i := range clockSamples {
		sent := e.clk.Now()
		now, own, err := c.StoreNow(ctx)
		recv := e.clk.Now()
		if err != nil || !own {
			return err
		}
		if i == 0 || recv.Sub(sent) < best.recv.Sub(best.sent) {
			best.now, best.sent, best.recv = now, sent, recv
		}
	}
	e.skew.sample(best.now, best.sent, best.recv)
	return nil
}
