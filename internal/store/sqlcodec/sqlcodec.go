// Package sqlcodec holds the encodings the SQL backends (pgstore,
// mysqlstore) share for record fields that have no SQL type of their own.
package sqlcodec

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/delayq/delayq/internal/store"
)

// EncodeHeaders encodes headers for a binary column (PostgreSQL bytea,
// MySQL blob): for each entry in key order, the key's length (4 bytes,
// big-endian), the key, the value's length, the value. Not JSON, not text:
// values may hold any bytes (NUL included, which PostgreSQL text and jsonb
// and MySQL utf8mb4 text refuse). pgstore's delayq_send builds the same
// encoding from jsonb in SQL. No headers encode to nil.
func EncodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	keys := make([]string, 0, len(h))
	size := 0
	for k, v := range h {
		keys = append(keys, k)
		size += 8 + len(k) + len(v)
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	for _, k := range keys {
		b = binary.BigEndian.AppendUint32(b, uint32(len(k))) // #nosec G115 -- header sizes are bounded by validation (8 KiB)
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(h[k]))) // #nosec G115 -- as above
		b = append(b, h[k]...)
	}
	return b
}

// DecodeHeaders reads what EncodeHeaders wrote: nil for no headers, an
// error wrapping store.ErrCorrupt for a truncated blob.
func DecodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := map[string]string{}
	for len(b) > 0 {
		var k, v string
		var ok bool
		if k, b, ok = lenPrefixed(b); !ok {
			return nil, fmt.Errorf("headers blob truncated: %w", store.ErrCorrupt)
		}
		if v, b, ok = lenPrefixed(b); !ok {
			return nil, fmt.Errorf("headers blob truncated: %w", store.ErrCorrupt)
		}
		h[k] = v
	}
	return h, nil
}

func lenPrefixed(b []byte) (string, []byte, bool) {
	if len(b) < 4 {
		return "", nil, false
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return "", nil, false
	}
	return string(b[:n]), b[n:], true
}
