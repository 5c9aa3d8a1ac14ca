package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"

	"github.com/delayq/delayq/internal/store"
)

// Record value format (versions 1 and 2). Topic and ID are not stored:
// they are in the key.
//
//	+---------+-------+----------+------------------------------------------+--------+
//	| version | state | priority | fields (varints, length-prefixed bytes)  | crc32c |
//	|  1 byte | 1 byte| v2: 1 B  |                                          | 4 B LE |
//	+---------+-------+----------+------------------------------------------+--------+
//
// Version 2 is written for a priority other than 0 only: a priority-0
// record is written as version 1 (priority byte absent), byte for byte
// what format 1 of the store wrote, so the common case costs nothing.
//
// fields, in order: seq (uvarint); dueAt, createdAt, updatedAt (varint);
// deliveries, failures, maxAttempts (varint); leaseUntil, deadAt, ackedAt
// (varint); payload, lastError, receipt (uvarint length + bytes); headers
// (uvarint count, then count × (key, value) length-prefixed, keys sorted).
// The CRC32C (Castagnoli) covers every byte before it. A state of
// "scheduled" means scheduled or ready: promotion does not rewrite the
// record (see the package doc and Store.resolve).
const (
	recordVersion         = 1
	recordVersionPriority = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBadRecord is wrapped by every decode error.
var errBadRecord = errors.New("bad record")

// encodeRecord appends r's value encoding to dst.
func encodeRecord(dst []byte, r *store.Record) []byte {
	start := len(dst)
	if r.Priority == 0 {
		dst = append(dst, recordVersion, byte(r.State))
	} else {
		dst = append(dst, recordVersionPriority, byte(r.State), r.Priority)
	}
	dst = binary.AppendUvarint(dst, r.Seq)
	for _, v := range [...]int64{r.DueAt, r.CreatedAt, r.UpdatedAt,
		int64(r.Deliveries), int64(r.Failures), int64(r.MaxAttempts),
		r.LeaseUntil, r.DeadAt, r.AckedAt} {
		dst = binary.AppendVarint(dst, v)
	}
	dst = appendBytes(dst, r.Payload)
	dst = appendBytes(dst, []byte(r.LastError))
	dst = appendBytes(dst, []byte(r.Receipt))
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	if len(r.Headers) > 0 {
		keys := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dst = appendBytes(dst, []byte(k))
			dst = appendBytes(dst, []byte(r.Headers[k]))
		}
	}
	return appendChecksum(dst, start)
}

// appendChecksum appends the CRC32C of dst[start:].
func appendChecksum(dst []byte, start int) []byte {
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decodeRecord decodes a value made by encodeRecord. It never panics: any
// malformed input yields an error wrapping errBadRecord. The result does
// not alias data.
func decodeRecord(data []byte, topic, id string) (*store.Record, error) {
	if len(data) < 2+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", errBadRecord, len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", errBadRecord, sum, got)
	}
	fields := 2
	switch body[0] {
	case recordVersion:
	case recordVersionPriority:
		fields = 3
	default:
		return nil, fmt.Errorf("%w: unknown version %d", errBadRecord, body[0])
	}
	if len(body) < fields {
		return nil, fmt.Errorf("%w: %d bytes is too short", errBadRecord, len(data))
	}
	r := &store.Record{Topic: topic, ID: id, State: store.State(body[1])}
	if r.State < store.StateScheduled || r.State > store.StateAcked {
		return nil, fmt.Errorf("%w: invalid state %d", errBadRecord, body[1])
	}
	if fields == 3 {
		// Only written for a priority other than 0: 0 here is damage.
		if r.Priority = body[2]; r.Priority == 0 {
			return nil, fmt.Errorf("%w: version 2 with priority 0", errBadRecord)
		}
	}
	d := decoder{buf: body[fields:]}
	r.Seq = d.uvarint()
	r.DueAt, r.CreatedAt, r.UpdatedAt = d.varint(), d.varint(), d.varint()
	r.Deliveries, r.Failures, r.MaxAttempts = d.int32(), d.int32(), d.int32()
	r.LeaseUntil, r.DeadAt, r.AckedAt = d.varint(), d.varint(), d.varint()
	r.Payload = d.bytes()
	r.LastError = string(d.bytes())
	r.Receipt = string(d.bytes())
	if n := d.uvarint(); n > 0 && d.err == nil {
		// Each header takes at least two bytes: bound n before allocating.
		if n > uint64(len(d.buf))/2 {
			return nil, fmt.Errorf("%w: %d headers in %d bytes", errBadRecord, n, len(d.buf))
		}
		r.Headers = make(map[string]string, n)
		prev := ""
		for i := uint64(0); i < n && d.err == nil; i++ {
			k, v := string(d.bytes()), string(d.bytes())
			if i > 0 && k <= prev {
				d.fail("header keys not strictly sorted")
			}
			r.Headers[k], prev = v, k
		}
	}
	if d.err == nil && len(d.buf) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.buf)))
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

// uvarintLen is the length of v's shortest uvarint encoding.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// zigzag is how binary.PutVarint maps a signed value to the unsigned one
// it writes.
func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) } // #nosec G115 -- zigzag encoding: bit reinterpretation for the on-disk encoding, no arithmetic on the result

type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errBadRecord, msg)
	}
	d.buf = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	// Only the shortest form is ours (an overlong one, e.g. 0x80 0x00 for
	// 0, decodes but was never written): anything else is damage.
	if n != uvarintLen(v) {
		d.fail("overlong uvarint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	if n != uvarintLen(zigzag(v)) {
		d.fail("overlong varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) int32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("int32 out of range")
		return 0
	}
	return int32(v)
}

// bytes returns a copy of the next length-prefixed field (nil if empty).
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail(fmt.Sprintf("length %d exceeds the %d bytes left", n, len(d.buf)))
		return nil
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	copy(b, d.buf)
	d.buf = d.buf[n:]
	return b
}
