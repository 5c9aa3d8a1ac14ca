package pebblestore

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"reflect"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

func sampleRecords() []*store.Record {
	return []*store.Record{
		{Topic: "t", ID: "a", Seq: 1, State: store.StateScheduled, DueAt: 5},
		{Topic: "orders.eu", ID: "x@y+z=", Seq: math.MaxUint64, State: store.StateInflight,
			Payload: []byte("hello\x00world"), Headers: map[string]string{"b": "2", "a": "1", "": ""},
			DueAt: -1, CreatedAt: math.MinInt64, UpdatedAt: math.MaxInt64,
			Deliveries: math.MaxInt32, Failures: math.MinInt32, MaxAttempts: 3,
			LastError: "boom", Receipt: "tok-1", LeaseUntil: 99},
		{Topic: "t", ID: "d", State: store.StateDead, DeadAt: 7, LastError: "x"},
		{Topic: "t", ID: "k", State: store.StateAcked, AckedAt: 1 << 50},
		{Topic: "t", ID: "p", Seq: 9, State: store.StateScheduled, DueAt: 5, Priority: 1},
		{Topic: "t", ID: "q", Seq: 10, State: store.StateInflight, DueAt: 6, Priority: 255,
			Payload: []byte("x"), Receipt: "tok-2", LeaseUntil: 7},
	}
}

// A priority-0 record is encoded as version 1, byte for byte what format
// 1 stores hold; another priority as version 2 with the priority byte.
func TestRecordCodecPriorityVersions(t *testing.T) {
	r := &store.Record{Topic: "t", ID: "a", Seq: 1, State: store.StateReady, DueAt: 5, Payload: []byte("p")}
	v1 := encodeRecord(nil, r)
	if v1[0] != recordVersion {
		t.Fatalf("priority 0: version %d, want %d", v1[0], recordVersion)
	}
	r.Priority = 7
	v2 := encodeRecord(nil, r)
	if v2[0] != recordVersionPriority || v2[2] != 7 || len(v2) != len(v1)+1 {
		t.Fatalf("priority 7: % x (priority 0: % x)", v2, v1)
	}
	// Version 2 with priority 0 is never written: damage, not priority 0.
	bad := append([]byte{recordVersionPriority, v1[1], 0}, v1[2:len(v1)-4]...)
	bad = appendChecksum(bad, 0)
	if _, _, err := decodeRecord(bad, "t", "a"); !errors.Is(err, errBadRecord) {
		t.Fatalf("version 2 with priority 0: err = %v", err)
	}
}

func recordsEqual(a, b *store.Record) bool {
	x, y := *a, *b
	if len(x.Payload) == 0 && len(y.Payload) == 0 {
		x.Payload, y.Payload = nil, nil
	}
	if len(x.Headers) == 0 && len(y.Headers) == 0 {
		x.Headers, y.Headers = nil, nil
	}
	hx, hy := x.Headers, y.Headers
	x.Headers, y.Headers = nil, nil
	return reflect.DeepEqual(x, y) && maps.Equal(hx, hy)
}

func TestRecordCodecRoundTrip(t *testing.T) {
	for _, r := range sampleRecords() {
		enc := encodeRecord(nil, r)
		got, split, err := decodeRecord(enc, r.Topic, r.ID)
		if err != nil || split {
			t.Fatalf("decode(%+v): %v", r, err)
		}
		if !recordsEqual(r, got) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
		// The encoding is deterministic (headers sorted).
		if enc2 := encodeRecord(nil, got); string(enc2) != string(enc) {
			t.Fatalf("re-encoding differs")
		}
	}
}

// Every truncation and every single-bit flip of a valid record must be
// rejected (the CRC32C catches all single-bit errors), never panic.
func TestRecordCodecGarbage(t *testing.T) {
	for _, r := range sampleRecords() {
		enc := encodeRecord(nil, r)
		for n := 0; n < len(enc); n++ {
			if _, _, err := decodeRecord(enc[:n], "t", "i"); !errors.Is(err, errBadRecord) {
				t.Fatalf("truncated to %d/%d: err = %v", n, len(enc), err)
			}
		}
		for i := range enc {
			for bit := range 8 {
				b := append([]byte(nil), enc...)
				b[i] ^= 1 << bit
				if _, _, err := decodeRecord(b, "t", "i"); !errors.Is(err, errBadRecord) {
					t.Fatalf("bit %d of byte %d flipped: err = %v", bit, i, err)
				}
			}
		}
	}
	// Valid checksum over a body that lies about lengths: still an error.
	for _, body := range [][]byte{
		{recordVersion, byte(store.StateReady), 0xff}, // bad uvarint
		{recordVersion, 0, 1},                         // bad state
		{2, 1},                                        // bad version
		{recordVersion, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f},                               // payload length too long
		{recordVersion, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f},                      // header count too big
		{recordVersion, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9},                      // trailing byte
		{recordVersion, 1, 1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0}, // int32 overflow
	} {
		enc := appendCRC(body)
		if _, _, err := decodeRecord(enc, "t", "i"); !errors.Is(err, errBadRecord) {
			t.Fatalf("body %x: err = %v", body, err)
		}
	}
}

// splitRoundTrip decodes r's state record and body.
func splitRoundTrip(r *store.Record) (*store.Record, error) {
	got, split, err := decodeRecord(encodeState(nil, r), r.Topic, r.ID)
	if err != nil {
		return nil, err
	}
	if !split || got.Payload != nil || got.Headers != nil {
		return nil, errors.New("a state record decodes as combined, or with a body")
	}
	return got, decodeBody(encodeBody(nil, r), got)
}

// The state record and the body of format 3 round-trip, the state record
// never holds the payload, and truncations and bit flips of either are
// rejected.
func TestSplitCodec(t *testing.T) {
	for _, r := range sampleRecords() {
		got, err := splitRoundTrip(r)
		if err != nil || !recordsEqual(r, got) {
			t.Fatalf("split round trip: %v\n got %+v\nwant %+v", err, got, r)
		}
		st, body := encodeState(nil, r), encodeBody(nil, r)
		if len(r.Payload) > 0 && bytes.Contains(st, r.Payload) {
			t.Fatalf("state record % x holds the payload %q", st, r.Payload)
		}
		decodeState := func(b []byte) error { _, _, err := decodeRecord(b, "t", "i"); return err }
		decodeBody := func(b []byte) error { return decodeBody(b, &store.Record{}) }
		for _, c := range []struct {
			enc    []byte
			decode func([]byte) error
		}{{st, decodeState}, {body, decodeBody}} {
			enc, decode := c.enc, c.decode
			for n := 0; n < len(enc); n++ {
				if err := decode(enc[:n]); !errors.Is(err, errBadRecord) {
					t.Fatalf("truncated to %d/%d: err = %v", n, len(enc), err)
				}
			}
			for i := range enc {
				for bit := range 8 {
					b := append([]byte(nil), enc...)
					b[i] ^= 1 << bit
					if err := decode(b); !errors.Is(err, errBadRecord) {
						t.Fatalf("bit %d of byte %d flipped: err = %v", bit, i, err)
					}
				}
			}
		}
	}
}

func appendCRC(body []byte) []byte {
	b := append([]byte(nil), body...)
	return appendChecksum(b, 0)
}

// FuzzRecordCodec: decode(encode(x)) == x, and decode(garbage) returns an
// error without panicking. Seeds: testdata/fuzz/FuzzRecordCodec.
func FuzzRecordCodec(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(encodeRecord(nil, r), uint8(r.State), r.Seq, r.DueAt, int32(r.Failures), r.Payload, "k", "v", r.Receipt)
	}
	f.Fuzz(func(t *testing.T, garbage []byte, state uint8, seq uint64, due int64, n int32, payload []byte, hk, hv, receipt string) {
		// Garbage, as is and with a valid checksum appended.
		for _, b := range [][]byte{garbage, appendChecksum(append([]byte(nil), garbage...), 0)} {
			r, split, err := decodeRecord(b, "t", "i")
			if err == nil {
				// Whatever decodes must re-encode to the same bytes.
				enc := encodeRecord(nil, r)
				if split {
					enc = encodeState(nil, r)
				}
				if string(enc) != string(b) {
					t.Fatalf("decoded garbage re-encodes differently")
				}
			} else if !errors.Is(err, errBadRecord) {
				t.Fatalf("unwrapped error %v", err)
			}
			var body store.Record
			if err := decodeBody(b, &body); err == nil {
				if enc := encodeBody(nil, &body); string(enc) != string(b) {
					t.Fatalf("decoded garbage body re-encodes differently")
				}
			} else if !errors.Is(err, errBadRecord) {
				t.Fatalf("unwrapped body error %v", err)
			}
		}
		x := &store.Record{Topic: "t", ID: "i", Seq: seq, State: store.State(state%5 + 1),
			Payload: payload, Headers: map[string]string{hk: hv}, DueAt: due, CreatedAt: -due,
			UpdatedAt: due ^ 0x5555, Deliveries: n, Failures: -n, MaxAttempts: n / 2,
			LastError: hv, Receipt: receipt, LeaseUntil: due + 1, DeadAt: int64(n), AckedAt: int64(seq)}
		got, _, err := decodeRecord(encodeRecord(nil, x), "t", "i")
		if err != nil {
			t.Fatalf("decode(encode(x)): %v", err)
		}
		if !recordsEqual(x, got) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, x)
		}
		if got, err = splitRoundTrip(x); err != nil || !recordsEqual(x, got) {
			t.Fatalf("split round trip: %v\n got %+v\nwant %+v", err, got, x)
		}
	})
}
