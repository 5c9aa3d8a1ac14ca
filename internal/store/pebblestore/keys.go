package pebblestore

import (
	"bytes"
	"encoding/binary"

	"github.com/delayq/delayq/internal/store"
)

// Key prefixes. See doc.go for the layout. Every prefix is one letter and a
// slash so that a full listing of the keyspace is easy to read.
const (
	pfxMessage   = 'm' // m/{topic}\x00{id}                       → state record
	pfxBody      = 'b' // b/{topic}\x00{id}                       → body (payload, headers)
	pfxScheduled = 's' // s/{topic}\x00{due}{seq}                 → id
	pfxReady     = 'r' // r/{topic}\x00{due}{seq}                 → id (priority 0)
	pfxReadyPrio = 'p' // p/{topic}\x00{prio}{due}{seq}           → id (priority 1-255)
	pfxInflight  = 'i' // i/{topic}\x00{leaseUntil}{seq}          → id
	pfxLease     = 'l' // l/{leaseUntil}{topic}\x00{id}           → "": formats 1-3 only
	pfxDead      = 'd' // d/{topic}\x00{deadAt}{seq}              → id
	pfxAcked     = 'a' // a/{ackedAt}{topic}\x00{id}              → ""
	pfxTopic     = 't' // t/{topic}                               → settings
	pfxCounters  = 'c' // c/{topic}                               → counters (merge)
	pfxSchedule  = 'k' // k/{name}                                → schedule (schedule.go)
	pfxMeta      = 'z' // z/{name}                                → meta
	// x/{topic} → "": TopicDelete forgot the topic (its c/ key stays for
	// the tombstones' counts); the next insert or settings put removes it.
	pfxDeleted = 'x'
)

// Meta keys.
var (
	keySeqHighWater = []byte("z/seq")
	keyFormat       = []byte("z/format")
)

// formatVersion is written at creation and checked at open. Version 2
// added message priority: p/ keys, and records and s/ values that carry a
// priority other than 0. Version 1 data is version 2 data without them, so
// Open upgrades it by rewriting z/format alone; a binary that knows only
// version 1 refuses a version 2 directory instead of misreading it.
//
// Version 3 split a message into a state record (m/, version-3 record)
// and a body (b/: payload and headers), so that a state change rewrites
// a few dozen bytes rather than the payload. Version 1 and 2 records
// (combined) are still read as they are and become split at their first
// state change, so Open again upgrades by rewriting z/format alone; a
// binary that knows only version 2 refuses a version 3 directory, whose
// state records it cannot read.
//
// Version 4 dropped l/, the store-wide index of leases (two key writes
// per delivered message: about a fifth of the WAL bytes of a drained
// message); LeaseExpire finds expired leases in each topic's i/ index.
// Open upgrades by deleting l/ and rewriting z/format in one batch; a
// binary that knows only version 3 refuses a version 4 directory, whose
// leases it would never expire.
const formatVersion = 4

// oldestFormat is the oldest format Open reads (and upgrades).
const oldestFormat = 1

// orderedTime maps an int64 to a uint64 whose big-endian bytes sort like
// the int64 (flip the sign bit), so negative times still order correctly.
func orderedTime(t int64) uint64 { return uint64(t) ^ (1 << 63) } // #nosec G115 -- sign-flip for key order: bit reinterpretation for the on-disk encoding, no arithmetic on the result

func fromOrderedTime(u uint64) int64 { return int64(u ^ (1 << 63)) } // #nosec G115 -- inverse of orderedTime: bit reinterpretation for the on-disk encoding, no arithmetic on the result

// topicPrefix is "{p}/{topic}\x00": the common prefix of a topic's keys in a
// per-topic index (or the message table).
func topicPrefix(p byte, topic string) []byte { return topicPrefixRoom(p, topic, 0) }

// topicPrefixRoom is topicPrefix with room for rest more bytes: a key
// built on it is allocated once, not grown by each append (a send, a
// lease and an ack build several keys per message).
func topicPrefixRoom(p byte, topic string, rest int) []byte {
	k := make([]byte, 0, 3+len(topic)+rest)
	k = append(k, p, '/')
	k = append(k, topic...)
	return append(k, 0)
}

func messageKey(topic, id string) []byte {
	k := topicPrefixRoom(pfxMessage, topic, len(id))
	return append(k, id...)
}

// bodyKey is where a split message keeps its payload and headers.
func bodyKey(topic, id string) []byte {
	k := topicPrefixRoom(pfxBody, topic, len(id))
	return append(k, id...)
}

// indexKey is a per-topic ordered index key: {p}/{topic}\x00{t BE8}{seq BE8}.
func indexKey(p byte, topic string, t int64, seq uint64) []byte {
	k := topicPrefixRoom(p, topic, 16)
	return appendTimeSeq(k, t, seq)
}

// appendTopicPrefix, appendIndexKey, appendReadyKey and appendGlobalKey
// append the keys topicPrefix, indexKey, readyKey and globalKey make to
// dst: a txn builds the keys it only passes to its batch (which copies
// them) in one reused buffer.
func appendTopicPrefix(dst []byte, p byte, topic string) []byte {
	dst = append(dst, p, '/')
	dst = append(dst, topic...)
	return append(dst, 0)
}

func appendIndexKey(dst []byte, p byte, topic string, t int64, seq uint64) []byte {
	return appendTimeSeq(appendTopicPrefix(dst, p, topic), t, seq)
}

func appendReadyKey(dst []byte, topic string, prio uint8, due int64, seq uint64) []byte {
	if prio == 0 {
		return appendIndexKey(dst, pfxReady, topic, due, seq)
	}
	return appendTimeSeq(append(appendTopicPrefix(dst, pfxReadyPrio, topic), prio), due, seq)
}

func appendGlobalKey(dst []byte, p byte, t int64, topic, id string) []byte {
	dst = append(dst, p, '/')
	dst = binary.BigEndian.AppendUint64(dst, orderedTime(t))
	dst = append(dst, topic...)
	dst = append(dst, 0)
	return append(dst, id...)
}

// readyKey is where a ready message is indexed: r/ for priority 0, whose
// keys are those of format 1, p/ with the priority before {due}{seq}
// otherwise, so that each index iterates in lease order.
func readyKey(topic string, prio uint8, due int64, seq uint64) []byte {
	if prio == 0 {
		return indexKey(pfxReady, topic, due, seq)
	}
	k := topicPrefixRoom(pfxReadyPrio, topic, 17)
	k = append(k, prio)
	return appendTimeSeq(k, due, seq)
}

// suffixLen is the length of the part of index ix's keys after the topic
// prefix: {t}{seq}, and the priority byte before it in p/.
func suffixLen(ix int) int {
	if ix == ixReadyPrio {
		return 17
	}
	return 16
}

// scheduledValue is the value of r's s/ entry: the id, and for a priority
// other than 0, \x01 (never in an id) and the priority, which promotion
// reads to place the r/ or p/ key without reading the record.
func scheduledValue(r *store.Record) []byte {
	v := make([]byte, 0, len(r.ID)+2)
	v = append(v, r.ID...)
	if r.Priority != 0 {
		v = append(v, 1, r.Priority)
	}
	return v
}

// parseScheduledValue splits an s/ value made by scheduledValue.
func parseScheduledValue(v []byte) (id []byte, prio uint8) {
	if n := len(v) - 2; n > 0 && v[n] == 1 {
		return v[:n], v[n+1]
	}
	return v, 0
}

func appendTimeSeq(k []byte, t int64, seq uint64) []byte {
	k = binary.BigEndian.AppendUint64(k, orderedTime(t))
	return binary.BigEndian.AppendUint64(k, seq)
}

// parseIndexSuffix decodes the {t}{seq} tail of a per-topic index key.
func parseIndexSuffix(k []byte) (t int64, seq uint64, ok bool) {
	if len(k) < 16 {
		return 0, 0, false
	}
	s := k[len(k)-16:]
	return fromOrderedTime(binary.BigEndian.Uint64(s)), binary.BigEndian.Uint64(s[8:]), true
}

// globalKey is a global time-ordered index key: {p}/{t BE8}{topic}\x00{id}.
func globalKey(p byte, t int64, topic, id string) []byte {
	k := make([]byte, 0, 2+8+len(topic)+1+len(id))
	k = append(k, p, '/')
	k = binary.BigEndian.AppendUint64(k, orderedTime(t))
	k = append(k, topic...)
	k = append(k, 0)
	return append(k, id...)
}

// parseGlobalKey decodes a key made by globalKey.
func parseGlobalKey(k []byte) (t int64, topic, id string, ok bool) {
	if len(k) < 2+8+1 {
		return 0, "", "", false
	}
	t = fromOrderedTime(binary.BigEndian.Uint64(k[2:10]))
	rest := k[10:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return 0, "", "", false
	}
	return t, string(rest[:i]), string(rest[i+1:]), true
}

// globalPrefixEnd is the exclusive upper bound of keys with time <= t.
func globalUpper(p byte, t int64) []byte {
	k := []byte{p, '/'}
	if t == 1<<63-1 {
		return []byte{p, '/' + 1}
	}
	return binary.BigEndian.AppendUint64(k, orderedTime(t+1))
}

func topicKey(p byte, topic string) []byte {
	k := make([]byte, 0, 2+len(topic))
	k = append(k, p, '/')
	return append(k, topic...)
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
