package redisstore

import (
	"fmt"
	"hash/fnv"
	"strconv"
)

// Name limits. They mirror the engine's validators (delayq.ValidateTopic,
// delayq.ValidateID) so that the store can refuse, rather than mis-key, a
// name the engine should never have let through.
const (
	maxNameLen   = 200
	maxPrefixLen = 64
	// MaxPartitions is the largest Options.Partitions accepted.
	MaxPartitions = 256
	// seqWidth is the zero-padded width of Seq in index members, so that
	// equal scores order by Seq (ZSETs break score ties by member bytes).
	seqWidth = 20
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
	msgPrefix                        string // + id = the message hash
}

// all are the five index keys in the order every script takes them:
// KEYS[state] is the index of store.State state (1 scheduled … 5 acked).
func (k *partKeys) all() []string {
	return []string{k.sched, k.ready, k.lease, k.dead, k.acked}
}

// msg is the key of the hash holding message id.
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

// meta is the topic's hash (fields "created" and "settings"), in slot
// {topic}; it exists once the topic had a message or settings.
func (ks keyspace) meta(topic string) string { return ks.prefix + ":{" + topic + "}:meta" }

// topics is the SET of every topic name (the registry; its own slot).
func (ks keyspace) topics() string { return ks.prefix + ":topics" }

// seq is the store-wide Seq counter (a string key; INCRBY).
func (ks keyspace) seq() string { return ks.prefix + ":seq" }

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
	return int(h.Sum32() % uint32(ks.parts))
}

// seqString is Seq as it appears in index members and the "seq" field.
func seqString(seq uint64) string {
	return fmt.Sprintf("%0*d", seqWidth, seq)
}

func isAlnum(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
}

func isTopicByte(b byte) bool {
	return isAlnum(b) || b == '.' || b == '_' || b == ':' || b == '-'
}

func isIDByte(b byte) bool {
	return isTopicByte(b) || b == '@' || b == '+' || b == '='
}

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

func checkID(id string) error {
	if !validID(id) {
		return fmt.Errorf("redisstore: invalid message id %q", id)
	}
	return nil
}
