package redisstore

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// keyRE is the namespace every key of a topic must match (prefix "dq"):
// a partition index or message hash under the tag {topic#p}, or the
// topic's meta hash under {topic}.
var keyRE = regexp.MustCompile(`^dq:(\{[A-Za-z0-9._:-]{1,200}#[0-9]{1,3}\}:(sched|ready|ready:prios|ready:[1-9][0-9]{0,2}|lease|dead|acked|m:[A-Za-z0-9._:@+=-]{1,200})|\{[A-Za-z0-9._:-]{1,200}\}:meta)$`)

// hashTag returns the part of key Redis Cluster hashes, and how many
// '{' the key holds (our keys must have exactly one tag).
func hashTag(key string) (string, int) {
	n := strings.Count(key, "{")
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key, n
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key, n
	}
	return key[i+1 : i+1+j], n
}

// crc16 is Redis Cluster's CRC16 (XMODEM); slot = crc16(tag) % 16384.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func slot(key string) uint16 {
	tag, _ := hashTag(key)
	return crc16(tag) % 16384
}

// checkKeys asserts the key properties for one (topic, partition, id).
func checkKeys(t *testing.T, ks keyspace, topic string, p int, id string) {
	t.Helper()
	k := ks.part(topic, p)
	keys := append(k.all(), k.msg(id), k.readyOf(1), k.readyOf(255), k.readyPrios())
	want := slot(keys[0])
	for _, key := range keys {
		if !keyRE.MatchString(key) {
			t.Fatalf("key %q outside the namespace", key)
		}
		tag, n := hashTag(key)
		if n != 1 || strings.Count(key, "}") != 1 || tag != topic+"#"+itoa(p) {
			t.Fatalf("key %q: want exactly the hash tag {%s#%d}, got %q (%d '{')", key, topic, p, tag, n)
		}
		if slot(key) != want {
			t.Fatalf("key %q in slot %d, partition's slot is %d", key, slot(key), want)
		}
	}
	meta := ks.meta(topic)
	if !keyRE.MatchString(meta) {
		t.Fatalf("meta key %q outside the namespace", meta)
	}
	if tag, n := hashTag(meta); n != 1 || tag != topic {
		t.Fatalf("meta key %q: tag %q", meta, tag)
	}
}

func randName(r *rand.Rand, alphabet string, max int) string {
	n := 1 + r.IntN(max)
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

const (
	topicAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-"
	idAlphabet    = topicAlphabet + "@+="
)

// TestKeysProperty: every key built for a valid (topic, partition, id)
// matches the namespace and has exactly one hash tag, the partition's.
func TestKeysProperty(t *testing.T) {
	ks := keyspace{prefix: "dq", parts: DefaultPartitions}
	for _, topic := range []string{"a", "a:b:c", "x.y-z_1", "0", "-", strings.Repeat("t", 200), strings.Repeat(":", 200)} {
		for p := range ks.parts {
			for _, id := range []string{"m", "a:b:c", "x@y+z=", strings.Repeat("=", 200)} {
				checkKeys(t, ks, topic, p, id)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		topic, id := randName(r, topicAlphabet, maxNameLen), randName(r, idAlphabet, maxNameLen)
		checkKeys(t, ks, topic, ks.partitionOf(id), id)
	}
}

// TestPartitionTagsDistinct: no two (topic, partition) pairs share a tag,
// including topics that end in what looks like a partition number.
func TestPartitionTagsDistinct(t *testing.T) {
	ks := keyspace{prefix: "dq", parts: 16}
	seen := map[string]string{}
	for _, topic := range []string{"a", "a:1", "a#1", "a:1:1", "1", "a1"} {
		if !validTopic(topic) {
			continue
		}
		for p := range ks.parts {
			tag := ks.part(topic, p).tag
			if prev, ok := seen[tag]; ok {
				t.Fatalf("tag %s shared by %s and %s#%d", tag, prev, topic, p)
			}
			seen[tag] = topic + "#" + itoa(p)
		}
		if prev, ok := seen["{"+topic+"}"]; ok {
			t.Fatalf("meta tag of %s equals partition tag %s", topic, prev)
		}
	}
}

func TestValidators(t *testing.T) {
	for _, bad := range []string{"", "{x}", "}{", "a b", "a*", "../x", "a\x00", strings.Repeat("a", 201), "é"} {
		if validTopic(bad) || validID(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
	if validTopic("a@b") || !validID("a@b") {
		t.Errorf("'@' must be an id byte and not a topic byte")
	}
}

// FuzzKeyBuilder: for any input, a name the validators accept yields keys
// in the namespace with exactly one hash tag; a name they refuse is never
// keyed (checkTopic/checkID fail).
func FuzzKeyBuilder(f *testing.F) {
	f.Add("orders", "m1", uint8(0))
	f.Add("a:b:c", "a:b:c", uint8(3))
	f.Add("x.y-z_1", "x@y+z=", uint8(1))
	f.Add("{x}", "}{", uint8(2))
	f.Add("a#1", "id", uint8(1))
	f.Fuzz(func(t *testing.T, topic, id string, p uint8) {
		ks := keyspace{prefix: "dq", parts: DefaultPartitions}
		if (checkTopic(topic) == nil) != validTopic(topic) || (checkID(id) == nil) != validID(id) {
			t.Fatal("check and valid disagree")
		}
		if !validTopic(topic) || !validID(id) {
			if strings.ContainsAny(topic, "{}#") && validTopic(topic) {
				t.Fatalf("topic %q with a tag byte accepted", topic)
			}
			return
		}
		part := int(p) % ks.parts
		checkKeys(t, ks, topic, part, id)
		if got := ks.partitionOf(id); got < 0 || got >= ks.parts {
			t.Fatalf("partitionOf(%q) = %d", id, got)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestHeadersRoundTrip(t *testing.T) {
	for _, h := range []map[string]string{
		{"a": "1"},
		{"k\xff": "\x00v\xfe", "": "", "z": strings.Repeat("y", 300)},
	} {
		got, err := decodeHeaders(encodeHeaders(h))
		if err != nil || len(got) != len(h) {
			t.Fatalf("%q: got %q, %v", h, got, err)
		}
		for k, v := range h {
			if got[k] != v {
				t.Fatalf("%q: got %q", h, got)
			}
		}
	}
	if encodeHeaders(nil) != nil || encodeHeaders(map[string]string{}) != nil {
		t.Fatal("empty headers must encode to nil")
	}
	if _, err := decodeHeaders([]byte{5, 'a'}); err == nil {
		t.Fatal("truncated headers decoded")
	}
}
