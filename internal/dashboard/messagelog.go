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

// messageLog keeps the last events of all messages in a ring per shard
// (the oldest overwritten), about historyEvents per message of
// MaxMessages messages, and answers a message's history by scanning its
// shard. Every send, lease and ack of every message is recorded and few
// are ever viewed, so recording is an append: a map of entries relinked
// in an LRU list on every event cost ≈ 5 % of a batched drain's server
// CPU (cache misses on each lookup and eviction); a scan of a shard when
// the message page is read costs tens of µs. Sharded so API calls on
// different messages rarely contend.
type messageLog struct {
	seed   maphash.Seed
	per    int // most events a history answers (its oldest dropped)
	shards [16]logShard
}

// historyEvents is the events kept per message of MaxMessages: a
// message's send, lease and ack, and one more.
const historyEvents = 4

type logShard struct {
	mu   sync.Mutex
	ring []loggedEvent // grows to max, then wraps at next
	max  int
	next int
	// counted is the due time at which the fallback Upcoming counts each
	// message (absent: not counted), nil when the Recorder does not count
	// (RecorderConfig.NoUpcoming). At most maxCounted; a message dropped
	// over it stays counted where it was (DueCounts says so).
	counted    map[uint64]countedMsg
	maxCounted int
}

type msgKey struct{ topic, id string }

// loggedEvent is an event of the message whose key hashes to hash.
type loggedEvent struct {
	hash uint64
	key  msgKey
	ev   Event
}

type countedMsg struct {
	key msgKey
	due time.Time
}

func newMessageLog(maxMsgs, per int, counting bool) *messageLog {
	l := &messageLog{seed: maphash.MakeSeed(), per: per}
	perShard := max(1, (maxMsgs+len(l.shards)-1)/len(l.shards))
	for i := range l.shards {
		s := &l.shards[i]
		s.max = perShard * historyEvents
		if counting {
			s.counted, s.maxCounted = make(map[uint64]countedMsg), perShard
		}
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

// add records an event and, when the log counts, sets the due time at
// which the message is counted in the fallback Upcoming counts (zero: not
// counted). It returns the one set before, so the caller can move the
// count.
func (l *messageLog) add(topic, id string, ev Event, counted time.Time) (prev time.Time) {
	k := msgKey{topic, id}
	s, h := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := loggedEvent{hash: h, key: k, ev: ev}
	if len(s.ring) < s.max {
		s.ring = append(s.ring, e)
	} else {
		s.ring[s.next] = e
		s.next = (s.next + 1) % s.max
	}
	if s.counted == nil {
		return time.Time{}
	}
	c, ok := s.counted[h]
	mine := ok && c.key == k // else a 64-bit collision: the other one's count stays where it is
	if mine {
		prev = c.due
	}
	if counted.IsZero() {
		if mine {
			delete(s.counted, h)
		}
		return prev
	}
	if !ok && len(s.counted) >= s.maxCounted {
		for old := range s.counted { // full: drop any one
			delete(s.counted, old)
			break
		}
	}
	s.counted[h] = countedMsg{key: k, due: counted}
	return prev
}

// events returns a copy of a message's recorded events, oldest first, at
// most per (the most recent).
func (l *messageLog) events(topic, id string) []Event {
	k := msgKey{topic, id}
	s, h := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	// Oldest first: from next to the end, then the start (before the ring
	// is full next is 0 and the first part is all of it).
	for _, part := range [2][]loggedEvent{s.ring[s.next:], s.ring[:s.next]} {
		for i := range part {
			if e := &part[i]; e.hash == h && e.key == k {
				out = append(out, e.ev)
			}
		}
	}
	if len(out) > l.per {
		out = out[len(out)-l.per:]
	}
	for i := range out {
		out[i] = out[i].resolved()
	}
	return out
}

// MessageEvents returns what the Recorder saw happen to a message
// recently (from the engine's message events), oldest first; nil if
// nothing.
func (r *Recorder) MessageEvents(topic, id string) []Event { return r.msgs.events(topic, id) }
