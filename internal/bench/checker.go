package bench

import (
	"sync/atomic"
	"time"
)

// Checker checks deliveries against the messages a scenario sent: it
// finds duplicates, unexpected sequence numbers, early deliveries and
// missing messages, and measures lateness = first receive − due time.
// Observe is safe for concurrent use; SetDue and Exclude must happen
// before Result (the scenario waits for its senders first).
type Checker struct {
	// due and accepted are atomic because a sender may record them while
	// a consumer already reads them (a message due at once, a late trace).
	due        []atomic.Int64 // Unix ns; 0 = due now (never early)
	accepted   []atomic.Int64 // Unix ns the send returned, if after due
	recv       []atomic.Int64 // Unix ns of the first receive; 0 = none yet
	unique     atomic.Int64
	dups       atomic.Int64
	unexpected atomic.Int64
	lateTrace  *LateTrace // nil: none
}

// NewChecker expects sequence numbers 0..n-1.
func NewChecker(n int) *Checker {
	return &Checker{due: make([]atomic.Int64, n), accepted: make([]atomic.Int64, n), recv: make([]atomic.Int64, n)}
}

// SetDue records the due time of seq (zero time: due at once).
func (c *Checker) SetDue(seq uint64, t time.Time) {
	if t.IsZero() {
		c.due[seq].Store(0)
		return
	}
	c.due[seq].Store(t.UnixNano())
}

// Due returns the recorded due time of seq (zero if due at once).
func (c *Checker) Due(seq uint64) time.Time {
	ns := c.due[seq].Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Accepted records when the send of seq returned. If that is after the
// due time, lateness is measured from it instead: a queue cannot release a
// message before it has accepted it, and the send's own latency is the
// sender's figure, not the release lateness. It reports whether the
// message was accepted only after it was due.
func (c *Checker) Accepted(seq uint64, t time.Time) bool {
	ns := t.UnixNano()
	if ns > c.due[seq].Load() {
		c.accepted[seq].Store(ns)
		return true
	}
	c.accepted[seq].Store(0)
	return false
}

// Observe records deliveries.
func (c *Checker) Observe(ds []Delivery) {
	for _, d := range ds {
		if d.Seq >= uint64(len(c.recv)) {
			c.unexpected.Add(1)
			continue
		}
		at := d.At.UnixNano()
		if c.recv[d.Seq].CompareAndSwap(0, at) {
			c.unique.Add(1)
			if base := max(c.due[d.Seq].Load(), c.accepted[d.Seq].Load()); c.lateTrace != nil && base != 0 {
				c.lateTrace.late(d.Seq, time.Unix(0, base), d.At)
			}
		} else {
			c.dups.Add(1)
		}
	}
}

// TraceLate makes the first receive at least lt.Threshold late write
// lt's trace. Call it before the first Observe.
func (c *Checker) TraceLate(lt *LateTrace) { c.lateTrace = lt }

// Unique is the number of distinct expected messages received so far.
func (c *Checker) Unique() int64 { return c.unique.Load() }

// Received reports whether seq was received, and when.
func (c *Checker) Received(seq uint64) (time.Time, bool) {
	ns := c.recv[seq].Load()
	return time.Unix(0, ns), ns != 0
}

// LatenessResult summarises a checked run.
type LatenessResult struct {
	Expected   int64
	Received   int64 // expected messages received at least once
	Missing    int64 // expected, never received
	Duplicates int64 // receives after the first, of any message
	Unexpected int64 // receives of numbers the run never sent
	Early      int64 // received before due (a violation)
	// MostEarly is the largest earliness seen, as a positive duration.
	MostEarly time.Duration
	// Lateness holds, in µs, receive − max(due, accepted) of every received
	// message; early ones (and ones received before their send returned)
	// count as 0. Early ones are also counted in Early.
	Lateness *Histogram
}

// Result checks the messages for which expected(seq) is true (nil: all).
func (c *Checker) Result(expected func(seq uint64) bool) LatenessResult {
	r := LatenessResult{Lateness: &Histogram{}, Duplicates: c.dups.Load(), Unexpected: c.unexpected.Load()}
	for i := range c.recv {
		seq := uint64(i)
		if expected != nil && !expected(seq) {
			continue
		}
		r.Expected++
		at := c.recv[i].Load()
		if at == 0 {
			r.Missing++
			continue
		}
		r.Received++
		due := c.due[i].Load()
		if due != 0 && at < due {
			r.Early++
			r.MostEarly = max(r.MostEarly, time.Duration(due-at))
		}
		base := max(due, c.accepted[i].Load())
		lat := int64(0)
		if base != 0 {
			lat = max(at-base, 0)
		}
		r.Lateness.Record(lat / int64(time.Microsecond))
	}
	return r
}
