package redisstore

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/delayq/delayq/internal/domain"
)

// Name limits. Names use the domain's alphabets and length (the rules of
// domain.ValidateTopic and domain.ValidateID), so that the store can
// refuse, rather than mis-key, a name the engine should never have let
// through.
const (
	maxNameLen   = domain.MaxNameLen
	maxPrefixLen = 64
	// MaxPartitions is the largest Options.Partitions accepted.
	MaxPartitions = 256
)

// Seq is tn<<ctrBits | ctr: tn numbers the topic (assigned once, from a
// store-wide counter) and ctr counts the topic's inserts (a field of the
// topic's meta hash). Only ctr is reserved per send call, in the topic's
// own slot, so no store-wide key is touched on the send path; tn keeps Seq
// unique across the store. 2^20 topics, 2^44 sends per topic (5.5 years
// at 100k/s).
const (
	ctrBits = 44
	maxCtr  = 1<<ctrBits - 1
	maxTN   = 1<<(64-ctrBits) - 1
)

// keyspace builds every key the store uses. Its layout is documented in
// doc.go ("Key layout"); it is part of the stored format.
//
// Every key of a topic partition carries the hash tag {topic#p}; '#' is in
// neither the topic nor the id alphabet, and neither alphabet has '{' or
// '}', so a name can neither move a key to another slot nor make two
// (topic, partition) pairs share a tag. The topic-level key uses the tag
// {topic}, which differs from every partition tag by having no '#'.
type keyspace struct {
	prefix string
	parts  int
}

// partKeys are the keys of one topic partition, all in one hash slot.
type partKeys struct {
	topic string
	part  int
	tag   string // "{topic#p}"

	sched, ready, lease, dead, acked string
	msgPrefix                        string // + id = the message's key
}

// all are the five index keys in the order every script takes them:
// KEYS[state] is the index of store.State state (1 scheduled … 5 acked).
func (k *partKeys) all() []string {
	return []string{k.sched, k.ready, k.lease, k.dead, k.acked}
}

// readyOf is the ready index of priority prio: the ready key itself for
// priority 0 (so ready messages stored before priorities existed are
// priority 0), else ready:<prio>. rkey in the Lua prelude.
func (k *partKeys) readyOf(prio uint8) string {
	if prio == 0 {
		return k.ready
	}
	return k.ready + ":" + strconv.Itoa(int(prio))
}

// readyPrios is the ZSET of the priorities > 0 whose ready index is not
// empty (score and member the priority): what a lease walks. prios() in
// the Lua prelude.
func (k *partKeys) readyPrios() string { return k.ready + ":prios" }

// msg is the key of the STRING holding message id (see recHeader).
func (k *partKeys) msg(id string) string { return k.msgPrefix + id }

// part returns the keys of a topic partition. The topic must be valid.
func (ks keyspace) part(topic string, p int) *partKeys {
	tag := "{" + topic + "#" + strconv.Itoa(p) + "}"
	base := ks.prefix + ":" + tag + ":"
	return &partKeys{
		topic: topic, part: p, tag: tag,
		sched:     base + "sched",
		ready:     base + "ready",
		lease:     base + "lease",
		dead:      base + "dead",
		acked:     base + "acked",
		msgPrefix: base + "m:",
	}
}

// allParts returns the keys of every partition of a topic.
func (ks keyspace) allParts(topic string) []*partKeys {
	out := make([]*partKeys, ks.parts)
	for p := range out {
		out[p] = ks.part(topic, p)
	}
	return out
}

// meta is the topic's hash (fields "seq", "tn" and "settings"), in slot
// {topic}; it exists once the topic had a message or settings.
func (ks keyspace) meta(topic string) string { return ks.prefix + ":{" + topic + "}:meta" }

// topics is the SET of every topic name (the registry; its own slot).
func (ks keyspace) topics() string { return ks.prefix + ":topics" }

// topicNums is the store-wide counter of topic numbers (a string key;
// INCR once per new topic, never on the send path).
func (ks keyspace) topicNums() string { return ks.prefix + ":tn" }

// config is the hash of store-wide settings fixed at first Open
// ("partitions", "format").
func (ks keyspace) config() string { return ks.prefix + ":config" }

// channel is the Pub/Sub channel of notifications. It is not a key.
func (ks keyspace) channel() string { return ks.prefix + ":notify" }

// partitionOf maps a message id to its partition: FNV-1a 32 of the id
// modulo the partition count. Part of the stored format: changing it (or
// the count) would make existing messages unreachable.
func (ks keyspace) partitionOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(ks.parts)) // #nosec G115 -- parts is in [1, MaxPartitions = 256] (Open rejects others, fixPartitions checks the stored count)
}

// b62 digits are in ASCII order, so ctr62 preserves numeric order.
const b62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// ctr62 is the counter part of Seq as it starts an index member: '0' plus
// the digit count, then the base-62 digits. Byte order is numeric order
// (more digits sort later), so equal scores order by Seq; it is 2-9 bytes
// where the old zero-padded form took 21. Same as ctr62 in the Lua prelude.
func ctr62(n uint64) string {
	var d [16]byte
	i := len(d)
	for {
		i--
		d[i] = b62[n%62]
		n /= 62
		if n == 0 {
			break
		}
	}
	i--
	d[i] = byte('0' + len(d) - 1 - i)
	return string(d[i:])
}

// memberID is the id in an index member ("" if malformed).
func memberID(m string) string {
	if m == "" {
		return ""
	}
	n := int(m[0]) - '0' + 1
	if n < 2 || n >= len(m) {
		return ""
	}
	return m[n:]
}

// The alphabets are the domain's: neither has '{', '}' or '#' (see keyspace).
var (
	isTopicByte = domain.IsTopicByte
	isIDByte    = domain.IsIDByte
)

func validName(s string, ok func(byte) bool, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// validTopic reports whether s is 1–200 bytes of [A-Za-z0-9._:-].
func validTopic(s string) bool { return validName(s, isTopicByte, maxNameLen) }

// validID reports whether s is 1–200 bytes of [A-Za-z0-9._:@+=-].
func validID(s string) bool { return validName(s, isIDByte, maxNameLen) }

// validPrefix reports whether s can prefix keys: 1–64 bytes of the topic
// alphabet (so no hash tag, space or glob character).
func validPrefix(s string) bool { return validName(s, isTopicByte, maxPrefixLen) }

// checkTopic and checkID refuse names outside the alphabets. The engine
// validates first; this is defence in depth for the hash-tag guarantee.
func checkTopic(topic string) error {
	if !validTopic(topic) {
		return fmt.Errorf("redisstore: invalid topic name %q", topic)
	}
	return nil
}

// maxTime bounds the times a record stores: 6 signed bytes (recHeader),
// ±2^47 ms, about the year 6400. checkTime refuses the rest rather than
// letting the Lua struct library wrap them.
const maxTime = 1<<47 - 1

func checkTime(what string, v int64) error {
	if v < -maxTime || v > maxTime {
		return fmt.Errorf("redisstore: %s %d out of range ±%d ms", what, v, int64(maxTime))
	}
	return nil
}

// checkDue checks a due time as InsertMessage and MessageRescheduleParams
// give it: absolute, or a delay after now.
func checkDue(at int64, relative bool, delay int64) error {
	if relative {
		return checkTime("Delay", delay)
	}
	return checkTime("DueAt", at)
}

// dueArg is a script's due argument: absolute ms, or "+delay".
func dueArg(at int64, relative bool, delay int64) string {
	if relative {
		return after(delay)
	}
	return strconv.FormatInt(at, 10)
}

// after is a script's time argument for d ms after the script's now (the
// prelude's at): the instant is computed from the clock the script judges
// by, never from the caller's.
func after(d int64) string { return "+" + strconv.FormatInt(d, 10) }

func checkID(id string) error {
	if !validID(id) {
		return fmt.Errorf("redisstore: invalid message id %q", id)
	}
	return nil
}
