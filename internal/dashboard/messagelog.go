package dashboard

import (
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// Event is one thing the Recorder saw happen to a message.
type Event struct {
	At     time.Time
	What   string // "sent", "rescheduled", "leased", "acked", …
	Detail string

	// Every send and every lease is recorded, and few are ever viewed: they
	// keep the values and their Detail is formatted when read (events).
	lazy    lazyDetail
	lazyAt  time.Time
	attempt int
}

type lazyDetail uint8

const (
	detailSet   lazyDetail = iota // Detail holds the text
	detailDue                     // "due <lazyAt>"
	detailLease                   // "delivery <attempt>, lease until <lazyAt>"
)

// resolved returns e with its Detail formatted.
func (e Event) resolved() Event {
	switch e.lazy {
	case detailDue:
		e.Detail = "due " + fmtTime(e.lazyAt)
	case detailLease:
		e.Detail = fmt.Sprintf("delivery %d, lease until %s", e.attempt, fmtTime(e.lazyAt))
	}
	e.lazy = detailSet
	return e
}

// messageLog keeps the last events of recently touched messages: at most
// max messages (least recently touched evicted first), each with at most
// per events (oldest dropped). It is sharded so API calls on different
// messages rarely contend.
type messageLog struct {
	seed   maphash.Seed
	shards [16]logShard
}

type logShard struct {
	mu  sync.Mutex
	max int
	per int
	// root is the sentinel of the LRU ring: root.next is the most
	// recently touched entry, root.prev the least.
	root msgEntry
	// m finds an entry by its key's hash (the one that picked the shard):
	// an integer key hashes and compares in a few instructions, where
	// msgKey's two strings cost a third of the log's time. A hit whose
	// key differs (a 64-bit collision) is taken as a miss.
	m map[uint64]*msgEntry
}

type msgKey struct{ topic, id string }

type msgEntry struct {
	key     msgKey
	hash    uint64    // of key: its m key
	counted time.Time // due time at which the fallback Upcoming counts it (zero: not counted)
	events  []Event   // ring of len ≤ per, in order

	prev, next *msgEntry // LRU ring links (logShard.root)
}

func newMessageLog(maxMsgs, per int) *messageLog {
	l := &messageLog{seed: maphash.MakeSeed()}
	perShard := max(1, (maxMsgs+len(l.shards)-1)/len(l.shards))
	for i := range l.shards {
		s := &l.shards[i]
		*s = logShard{max: perShard, per: per, m: make(map[uint64]*msgEntry)}
		s.root.prev, s.root.next = &s.root, &s.root
	}
	return l
}

// shard returns k's shard and hash.
func (l *messageLog) shard(k msgKey) (*logShard, uint64) {
	var h maphash.Hash
	h.SetSeed(l.seed)
	_, _ = h.WriteString(k.topic) // maphash.Hash writes never fail
	_ = h.WriteByte(0)
	_, _ = h.WriteString(k.id)
	sum := h.Sum64()
	return &l.shards[sum%uint64(len(l.shards))], sum
}

// add records an event and sets the due time at which the message is
// counted in the fallback Upcoming counts (zero: not counted). It returns
// the one set before, so the caller can move the count.
func (l *messageLog) add(topic, id string, ev Event, counted time.Time) (prev time.Time) {
	k := msgKey{topic, id}
	s, h := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(k, h)
	prev, e.counted = e.counted, counted
	if len(e.events) == s.per {
		copy(e.events, e.events[1:])
		e.events = e.events[:s.per-1]
	}
	e.events = append(e.events, ev)
	return prev
}

// entry returns k's entry, made the most recent; a new one when k has
// none. A full shard evicts its least recent entry and reuses it, events
// array included: every send, lease and ack of a drain lands here, and
// in a steady stream of new messages each would allocate an entry and
// regrow its events otherwise.
func (s *logShard) entry(k msgKey, h uint64) *msgEntry {
	e, ok := s.m[h]
	switch {
	case ok && e.key == k:
		s.unlink(e)
		s.pushFront(e)
		return e
	case ok: // another message with the same hash: its history goes
		s.unlink(e)
		delete(s.m, h)
	}
	if len(s.m) >= s.max {
		e = s.root.prev
		s.unlink(e)
		delete(s.m, e.hash)
		clear(e.events) // drop the strings they hold
		*e = msgEntry{events: e.events[:0]}
	} else {
		e = &msgEntry{}
	}
	e.key, e.hash = k, h
	s.m[h] = e
	s.pushFront(e)
	return e
}

func (s *logShard) unlink(e *msgEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *logShard) pushFront(e *msgEntry) {
	e.prev, e.next = &s.root, s.root.next
	s.root.next.prev = e
	s.root.next = e
}

// events returns a copy of a message's recorded events, oldest first.
func (l *messageLog) events(topic, id string) []Event {
	k := msgKey{topic, id}
	s, h := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[h]
	if !ok || e.key != k {
		return nil
	}
	evs := e.events
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = e.resolved()
	}
	return out
}

// MessageEvents returns what the Recorder saw happen to a message
// recently (from the engine's message events), oldest first; nil if
// nothing.
func (r *Recorder) MessageEvents(topic, id string) []Event { return r.msgs.events(topic, id) }
