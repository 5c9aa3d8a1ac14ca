package engine

import "time"

// A long-poll's first look at the store is skipped when the topic is
// known to hold nothing leasable: a look that took fewer than it asked
// for (and was not held back by the rate limit) started after the last
// event that can make a message leasable here, and that was recently.
//
// Those events are counted per topic (topic.changes): every wake-up of
// the topic's long-polls (a local send or nack due now, another server's
// send heard through the store's notifications, a lease expiry, a resume,
// the safety sweep finding ready messages) and every firing of its
// timer (something came due, by this server's wheel). A look records the
// count it started at; a long-poll that arrives while the count is
// unchanged would find what that look found after it: nothing more. It
// registers and waits instead, and the next event wakes it as it wakes
// any waiting long-poll.
//
// On a store of its own the saving is a Pebble seek; on a shared store
// (Redis, PostgreSQL, MySQL) it is a round trip and a script or query:
// under a steady release rate most long-polls arrive right after their
// previous answer took what was due, and that first look found nothing.
//
// What is not announced (a notification lost while the subscription
// reconnects) is found by the wait's last look or the safety sweep, as it
// is for a long-poll already waiting; drainedFresh bounds how long a
// record is trusted at all.

// drainedFresh is how long after its look an empty result is trusted.
const drainedFresh = time.Second

// drained is the last look that left nothing leasable behind.
type drained struct {
	changes uint64    // topic.changes when the look started
	at      time.Time // when it started
}

// changed counts an event that can make messages leasable.
func (t *topic) changed() { t.changes.Add(1) }

// lookedDry records that a look started at changes (at start) left nothing
// leasable behind it.
func (t *topic) lookedDry(changes uint64, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if changes >= t.dry.changes {
		t.dry = drained{changes: changes, at: start}
	}
}

// knownDry reports whether a look now would find nothing: no event since
// a recent look that left nothing behind.
func (t *topic) knownDry(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.dry.at.IsZero() && t.dry.changes == t.changes.Load() && now.Sub(t.dry.at) < drainedFresh
}
