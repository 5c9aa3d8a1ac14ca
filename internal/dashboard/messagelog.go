package dashboard

import (
	"container/list"
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
	lru *list.List // of *msgEntry, front = most recent
	m   map[msgKey]*list.Element
}

type msgKey struct{ topic, id string }

type msgEntry struct {
	key     msgKey
	counted time.Time // due time at which the fallback Upcoming counts it (zero: not counted)
	events  []Event   // ring of len ≤ per, in order
}

func newMessageLog(maxMsgs, per int) *messageLog {
	l := &messageLog{seed: maphash.MakeSeed()}
	perShard := max(1, (maxMsgs+len(l.shards)-1)/len(l.shards))
	for i := range l.shards {
		l.shards[i] = logShard{max: perShard, per: per, lru: list.New(), m: make(map[msgKey]*list.Element)}
	}
	return l
}

func (l *messageLog) shard(k msgKey) *logShard {
	var h maphash.Hash
	h.SetSeed(l.seed)
	_, _ = h.WriteString(k.topic) // maphash.Hash writes never fail
	_ = h.WriteByte(0)
	_, _ = h.WriteString(k.id)
	return &l.shards[h.Sum64()%uint64(len(l.shards))]
}

// add records an event and sets the due time at which the message is
// counted in the fallback Upcoming counts (zero: not counted). It returns
// the one set before, so the caller can move the count.
func (l *messageLog) add(topic, id string, ev Event, counted time.Time) (prev time.Time) {
	k := msgKey{topic, id}
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(k)
	prev, e.counted = e.counted, counted
	if len(e.events) == s.per {
		copy(e.events, e.events[1:])
		e.events = e.events[:s.per-1]
	}
	e.events = append(e.events, ev)
	return prev
}

func (s *logShard) entry(k msgKey) *msgEntry {
	if el, ok := s.m[k]; ok {
		s.lru.MoveToFront(el)
		return el.Value.(*msgEntry)
	}
	if s.lru.Len() >= s.max {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.m, old.Value.(*msgEntry).key)
	}
	e := &msgEntry{key: k}
	s.m[k] = s.lru.PushFront(e)
	return e
}

// events returns a copy of a message's recorded events, oldest first.
func (l *messageLog) events(topic, id string) []Event {
	k := msgKey{topic, id}
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.m[k]
	if !ok {
		return nil
	}
	evs := el.Value.(*msgEntry).events
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
