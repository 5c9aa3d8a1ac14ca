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

// Record value formats. Topic and ID are not stored: they are in the key.
//
// Format 3 of the store splits a message in two keys (see doc.go): the
// state record under m/, rewritten by every state change, and the body
// under b/ (payload and headers), written once at send and deleted with
// the message or when it is acked. Versions 1 and 2 are the combined
// record of formats 1 and 2, which holds the body too; they are still
// read (a message stored so is rewritten split by its first state change).
//
//	+---------+-------+----------+------------------------------------------+--------+
//	| version | state | priority | fields (varints, length-prefixed bytes)  | crc32c |
//	|  1 byte | 1 byte| v2/3: 1 B|                                          | 4 B LE |
//	+---------+-------+----------+------------------------------------------+--------+
//
// fields, in order: seq (uvarint); dueAt, createdAt, updatedAt (varint);
// deliveries, failures, maxAttempts (varint); leaseUntil, deadAt, ackedAt
// (varint); payload (versions 1 and 2 only), lastError, receipt (uvarint
// length + bytes); headers (versions 1 and 2 only: uvarint count, then
// count × (key, value) length-prefixed, keys sorted).
//
// Version 1 is the combined record of priority 0, version 2 that of
// another priority; version 3, the state record, always has the priority
// byte. The fields that never change after send (seq, createdAt,
// maxAttempts, priority) stay in the state record: a few bytes, and the
// index keys a state change moves need seq and priority without reading
// the body. An acked state record has no body.
//
// Body (b/ value): version (1 byte, 1), payload, headers as above, crc32c.
//
// The CRC32C (Castagnoli) covers every byte before it. A state of
// "scheduled" means scheduled or ready: promotion does not rewrite the
// record (see the package doc and Store.resolve).
const (
	recordVersion         = 1
	recordVersionPriority = 2
	recordVersionState    = 3
	bodyVersion           = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBadRecord is wrapped by every decode error.
var errBadRecord = errors.New("bad record")

// encodeRecord appends r's combined (version 1 or 2) encoding to dst: what
// formats 1 and 2 stored. The store writes it only when a test asks
// (writeCombined), to build data of an older format.
func encodeRecord(dst []byte, r *store.Record) []byte {
	start := len(dst)
	if r.Priority == 0 {
		dst = append(dst, recordVersion, byte(r.State))
	} else {
		dst = append(dst, recordVersionPriority, byte(r.State), r.Priority)
	}
	dst = appendFields(dst, r)
	dst = appendBytes(dst, r.Payload)
	dst = appendBytes(dst, []byte(r.LastError))
	dst = appendBytes(dst, []byte(r.Receipt))
	dst = appendHeaders(dst, r.Headers)
	return appendChecksum(dst, start)
}

// encodeState appends r's state record (version 3) to dst: everything but
// the payload and headers.
func encodeState(dst []byte, r *store.Record) []byte {
	start := len(dst)
	dst = append(dst, recordVersionState, byte(r.State), r.Priority)
	dst = appendFields(dst, r)
	dst = appendBytes(dst, []byte(r.LastError))
	dst = appendBytes(dst, []byte(r.Receipt))
	return appendChecksum(dst, start)
}

// encodeBody appends r's body (payload and headers) to dst.
func encodeBody(dst []byte, r *store.Record) []byte {
	start := len(dst)
	dst = append(dst, bodyVersion)
	dst = appendBytes(dst, r.Payload)
	dst = appendHeaders(dst, r.Headers)
	return appendChecksum(dst, start)
}

func appendFields(dst []byte, r *store.Record) []byte {
	dst = binary.AppendUvarint(dst, r.Seq)
	for _, v := range [...]int64{r.DueAt, r.CreatedAt, r.UpdatedAt,
		int64(r.Deliveries), int64(r.Failures), int64(r.MaxAttempts),
		r.LeaseUntil, r.DeadAt, r.AckedAt} {
		dst = binary.AppendVarint(dst, v)
	}
	return dst
}

func appendHeaders(dst []byte, h map[string]string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(h)))
	if len(h) > 0 {
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dst = appendBytes(dst, []byte(k))
			dst = appendBytes(dst, []byte(h[k]))
		}
	}
	return dst
}

// appendChecksum appends the CRC32C of dst[start:].
func appendChecksum(dst []byte, start int) []byte {
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// checked returns data without its CRC32C, which it checks.
func checked(data []byte, min int) ([]byte, error) {
	if len(data) < min+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", errBadRecord, len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", errBadRecord, sum, got)
	}
	return body, nil
}

// decodeRecord decodes a value made by encodeRecord or encodeState; split
// says it is a state record (version 3), whose body, if it is not acked,
// is under b/. It never panics: any malformed input yields an error
// wrapping errBadRecord. The result does not alias data.
func decodeRecord(data []byte, topic, id string) (r *store.Record, split bool, err error) {
	body, err := checked(data, 2)
	if err != nil {
		return nil, false, err
	}
	fields := 2
	switch body[0] {
	case recordVersion:
	case recordVersionPriority:
		fields = 3
	case recordVersionState:
		fields, split = 3, true
	default:
		return nil, false, fmt.Errorf("%w: unknown version %d", errBadRecord, body[0])
	}
	if len(body) < fields {
		return nil, false, fmt.Errorf("%w: %d bytes is too short", errBadRecord, len(data))
	}
	r = &store.Record{Topic: topic, ID: id, State: store.State(body[1])}
	if r.State < store.StateScheduled || r.State > store.StateAcked {
		return nil, false, fmt.Errorf("%w: invalid state %d", errBadRecord, body[1])
	}
	if fields == 3 {
		r.Priority = body[2]
		// Version 2 is only written for a priority other than 0: 0 there
		// is damage.
		if !split && r.Priority == 0 {
			return nil, false, fmt.Errorf("%w: version 2 with priority 0", errBadRecord)
		}
	}
	d := decoder{buf: body[fields:]}
	r.Seq = d.uvarint()
	r.DueAt, r.CreatedAt, r.UpdatedAt = d.varint(), d.varint(), d.varint()
	r.Deliveries, r.Failures, r.MaxAttempts = d.int32(), d.int32(), d.int32()
	r.LeaseUntil, r.DeadAt, r.AckedAt = d.varint(), d.varint(), d.varint()
	if !split {
		r.Payload = d.bytes()
	}
	r.LastError = string(d.bytes())
	r.Receipt = string(d.bytes())
	if !split {
		r.Headers = d.headers()
	}
	if err := d.end(); err != nil {
		return nil, false, err
	}
	return r, split, nil
}

// decodeBody decodes a value made by encodeBody into r's payload and
// headers. Same guarantees as decodeRecord.
func decodeBody(data []byte, r *store.Record) error {
	body, err := checked(data, 1)
	if err != nil {
		return err
	}
	if body[0] != bodyVersion {
		return fmt.Errorf("%w: unknown body version %d", errBadRecord, body[0])
	}
	d := decoder{buf: body[1:]}
	payload := d.bytes()
	headers := d.headers()
	if err := d.end(); err != nil {
		return err
	}
	r.Payload, r.Headers = payload, headers
	return nil
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

// headers reads a header count and the headers (nil if none).
func (d *decoder) headers() map[string]string {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	// Each header takes at least two bytes: bound n before allocating.
	if n > uint64(len(d.buf))/2 {
		d.fail(fmt.Sprintf("%d headers in %d bytes", n, len(d.buf)))
		return nil
	}
	h := make(map[string]string, n)
	prev := ""
	for i := uint64(0); i < n && d.err == nil; i++ {
		k, v := string(d.bytes()), string(d.bytes())
		if i > 0 && k <= prev {
			d.fail("header keys not strictly sorted")
		}
		h[k], prev = v, k
	}
	return h
}

// end is the decode error, or one for bytes left over.
func (d *decoder) end() error {
	if d.err == nil && len(d.buf) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.buf)))
	}
	return d.err
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
