package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// The record codec: how a message is stored (written by the scripts'
// prelude, read here) and how script replies are read.
//
// A message is one STRING: a fixed binary header, three length-prefixed
// strings, then the payload (see recHeader and decodeBlob). One string
// per message, rather than a hash with a field per record field, because
// a payload longer than hash-max-listpack-value (64 B by default) turns a
// hash into a hashtable with a dict entry and two SDS per field: that was
// most of the old layout's ~1.2 KB per message. The id is not stored: it
// is in the key, and in the index member.

// encodeHeaders writes headers binary-safely (JSON would mangle invalid
// UTF-8): for each key in sorted order, uvarint len, key, uvarint len,
// value. Empty or nil headers encode to nil (the field is not stored).
func encodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(h)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		b = append(b, h[k]...)
	}
	return b
}

func decodeHeaders(b []byte) (map[string]string, error) {
	h := map[string]string{}
	next := func() (string, error) {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b[w:])) < n {
			return "", errors.New("truncated headers")
		}
		b = b[w:]
		s := string(b[:n]) // n <= len(b), checked above
		b = b[n:]
		return s, nil
	}
	for len(b) > 0 {
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		h[k] = v
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

// recHeader is the size of a message record's fixed header (HDR in the
// Lua prelude), all big-endian:
//
//	st   1  state (1-5), and the flags recPriority and recArea
//	tn   3  topic number  \ Seq = tn<<ctrBits | ctr
//	ctr  6  counter       /
//	due  6  DueAt            (signed; Unix ms)
//	cat  6  CreatedAt
//	uat  6  UpdatedAt
//	t    6  LeaseUntil (inflight), DeadAt (dead), AckedAt (acked), else 0
//	dlv  4  Deliveries       (signed)
//	fail 4  Failures
//	max  4  MaxAttempts
//
// then, only when st has bit recPriority set (Priority > 0), one byte of
// Priority — so a message of the default priority costs nothing more,
// and a record written before priorities existed reads as priority 0.
// Then, when st has bit recArea set, the area: its size (uint32) and that
// many bytes holding Receipt (uint16 length + bytes) and LastError
// (uint32 length + bytes), zero-padded. Records written before the area
// existed (no recArea) have Receipt and LastError there unpadded, as
// old servers wrote them. Then headers (uint32 length + encodeHeaders
// bytes), and the payload as the rest. One slot t serves three times
// because the contract keeps LeaseUntil, DeadAt and AckedAt zero outside
// their state. Receipt is empty except in an inflight record and in an
// acked tombstone, which keeps the receipt that acked it (the receipt's
// bytes, ~18 for an engine receipt, are its only cost: a tombstone has no
// area, headers or payload). A tombstone not made by an ack, or written
// before acks kept the receipt, holds an empty one and reads as such.
//
// Everything a lease, an extension, a nack or a lease expiry changes is
// in the header and the area, so when the new Receipt and LastError fit
// the area those rewrite only the record's first bytes (save in the
// prelude), never its headers or payload. Only records with 1 KiB or
// more of headers and payload get an area (48 bytes when new: an engine
// receipt, 16-character token, '-', Deliveries, beside "lease expired";
// 46 + 4 + 48 + 4 bytes of overhead): the others are laid out as in
// format 2 (46 + 10 bytes, so a 256-byte payload stays in jemalloc's
// 320-byte class) and rewritten whole, which costs them about as much.
const recHeader = 1 + 3 + 6 + 4*6 + 3*4

// recPriority is the bit of a record's state byte that says a Priority
// byte follows the fixed header (PRI in the Lua prelude).
const recPriority = 0x80

// recArea is the bit of a record's state byte that says the receipt and
// last error are in a sized area (LAY in the Lua prelude).
const recArea = 0x40

// blobReader reads a record's fields in order; a short read marks it bad.
type blobReader struct {
	b   string
	bad bool
}

func (r *blobReader) uint(n int) uint64 {
	if len(r.b) < n {
		r.bad, r.b = true, ""
		return 0
	}
	var v uint64
	for i := range n {
		v = v<<8 | uint64(r.b[i])
	}
	r.b = r.b[n:]
	return v
}

// int reads an n-byte two's-complement integer.
func (r *blobReader) int(n int) int64 {
	shift := 64 - 8*n
	return int64(r.uint(n)<<shift) >> shift // #nosec G115 -- sign extension: bit reinterpretation of the n-byte field shifted to the top, then an arithmetic shift back
}

func (r *blobReader) str(lenBytes int) string {
	n := r.uint(lenBytes)
	if r.bad || uint64(len(r.b)) < n {
		r.bad, r.b = true, ""
		return ""
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// recBytes is a record as a script answered it: its bytes, or, when the
// script rewrote only its prefix, {prefix, the bytes before}, spliced
// here (the payload then never went through a Lua concatenation).
func recBytes(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []any:
		if len(x) != 2 {
			return "", false
		}
		head, ok1 := x[0].(string)
		old, ok2 := x[1].(string)
		if !ok1 || !ok2 || len(head) > len(old) {
			return "", false
		}
		return head + old[len(head):], true
	}
	return "", false
}

// decodeBlob reads a message record as a script stored it (a STRING; see
// recHeader) or answered it (see recBytes). The id is not in the value:
// the caller knows it.
func decodeBlob(topic, id string, v any) (*store.Record, error) {
	b, ok := recBytes(v)
	if !ok {
		return nil, errReply("record", v)
	}
	r := &blobReader{b: b}
	rec := &store.Record{Topic: topic, ID: id}
	st := r.uint(1)
	rec.State = store.State(st &^ (recPriority | recArea)) // #nosec G115 -- a 1-byte field (< 256); unknown states are rejected below
	tn, ctr := r.uint(3), r.uint(6)
	rec.Seq = tn<<ctrBits | ctr
	rec.DueAt, rec.CreatedAt, rec.UpdatedAt = r.int(6), r.int(6), r.int(6)
	t := r.int(6)
	rec.Deliveries, rec.Failures, rec.MaxAttempts = int32(r.int(4)), int32(r.int(4)), int32(r.int(4)) // #nosec G115 -- 4-byte fields sign-extended by r.int: always in int32's range
	if st&recPriority != 0 {
		rec.Priority = uint8(r.uint(1)) // #nosec G115 -- a 1-byte field
	}
	if st&recArea != 0 {
		area := &blobReader{b: r.str(4)}
		rec.Receipt, rec.LastError = area.str(2), area.str(4)
		r.bad = r.bad || area.bad
	} else {
		rec.Receipt, rec.LastError = r.str(2), r.str(4)
	}
	h := r.str(4)
	if r.bad {
		return nil, fmt.Errorf("redisstore: record %s/%s: truncated (%d bytes): %w", topic, id, len(b), store.ErrCorrupt)
	}
	if len(r.b) > 0 {
		rec.Payload = []byte(r.b)
	}
	if h != "" {
		hd, err := decodeHeaders([]byte(h))
		if err != nil {
			return nil, fmt.Errorf("redisstore: record %s/%s: %w: %v", topic, id, store.ErrCorrupt, err)
		}
		rec.Headers = hd
	}
	switch rec.State {
	case store.StateInflight:
		rec.LeaseUntil = t
	case store.StateDead:
		rec.DeadAt = t
	case store.StateAcked:
		rec.AckedAt = t // Receipt: the one that acked it, or "" (see recHeader)
	case store.StateScheduled, store.StateReady:
	default:
		return nil, fmt.Errorf("redisstore: record %s/%s: state %d: %w", topic, id, rec.State, store.ErrCorrupt)
	}
	return rec, nil
}

// decodePairs reads a script's list of records as id, record pairs.
func decodePairs(topic string, vs []any) ([]*store.Record, error) {
	if len(vs)%2 != 0 {
		return nil, errReply("records", vs)
	}
	out := make([]*store.Record, 0, len(vs)/2)
	for i := 0; i < len(vs); i += 2 {
		id, ok := vs[i].(string)
		if !ok {
			return nil, errReply("record id", vs[i])
		}
		r, err := decodeBlob(topic, id, vs[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// reply helpers. A malformed reply means a script and this code disagree:
// it is reported as corruption, never silently skipped.

func errReply(what string, v any) error {
	return fmt.Errorf("redisstore: unexpected script reply for %s: %T %v: %w", what, v, v, store.ErrCorrupt)
}

func asSlice(v any) []any {
	a, _ := v.([]any)
	return a
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		return parseInt(x)
	default:
		return 0
	}
}

// parseInt reads a stored integer; scores may come back in float form.
func parseInt(s string) int64 {
	if s == "" {
		return 0
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// status is the answer of a script that names one message:
// {now, "ok"|"nf"|"conflict", record-or-state}.
type status struct {
	now  int64
	code string
	rest []any
}

func readStatus(cmd *redis.Cmd) (status, error) {
	a := asSlice(cmd.Val())
	if len(a) < 2 {
		return status{}, errReply(cmd.Name(), cmd.Val())
	}
	return status{now: asInt(a[0]), code: asString(a[1]), rest: a[2:]}, nil
}

// statusErr maps a non-ok status to the contract's errors.
func statusErr(op, topic, id string, st status) error {
	switch st.code {
	case "nf":
		return fmt.Errorf("redisstore: %s: message %q in topic %q: %w", op, id, topic, store.ErrNotFound)
	case "conflict":
		state := "?"
		if len(st.rest) > 0 {
			state = store.State(asInt(st.rest[0])).String() // #nosec G115 -- the state byte (r.st) the script returns, 0-255; only names the state in the error message
		}
		return fmt.Errorf("redisstore: %s: message %q in topic %q is %s or the receipt is stale: %w", op, id, topic, state, store.ErrConflict)
	default:
		return fmt.Errorf("redisstore: %s: unexpected status %q: %w", op, st.code, store.ErrCorrupt)
	}
}
