package domain

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// crockford is Crockford's base32 alphabet (no I, L, O, U); it sorts in
// byte order, so IDs made later compare greater as strings.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IDGenerator makes message ids: 26 characters of Crockford base32, a
// 48-bit Unix millisecond time followed by 80 bits that are random at each
// new millisecond and incremented within one (the monotonic ULID layout),
// so the ids of one generator sort by creation, also within a millisecond.
// Across generators (processes) ids of a later millisecond sort later and
// the order within a millisecond is random; collisions are negligible
// (2^-80 per pair per millisecond).
//
// The zero value is ready; it is safe for concurrent use.
type IDGenerator struct {
	mu     sync.Mutex
	lastMS int64
	hi     uint16 // top 16 of the 80 entropy bits
	lo     uint64 // low 64
}

// Next returns the id for Unix millisecond ms. A time earlier than the
// previous call's is taken as that time, so ids never go backwards.
func (g *IDGenerator) Next(ms int64) string {
	g.mu.Lock()
	if ms <= g.lastMS {
		ms = g.lastMS
		g.lo++
		if g.lo == 0 {
			g.hi++
		}
	} else {
		g.lastMS = ms
		var b [10]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
		g.hi = binary.BigEndian.Uint16(b[:2])
		g.lo = binary.BigEndian.Uint64(b[2:])
	}
	hi, lo := g.hi, g.lo
	g.mu.Unlock()

	var raw [16]byte
	binary.BigEndian.PutUint64(raw[0:8], uint64(ms)<<16|uint64(hi)) // #nosec G115 -- bit packing of the ULID time field (48 bits of unix ms), no arithmetic on it
	binary.BigEndian.PutUint64(raw[8:16], lo)
	return encodeBase32(raw)
}

// encodeBase32 writes 128 bits as 26 Crockford characters (the first
// carries 3 bits), most significant first.
func encodeBase32(raw [16]byte) string {
	hi := binary.BigEndian.Uint64(raw[0:8])
	lo := binary.BigEndian.Uint64(raw[8:16])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

var processIDs IDGenerator

// NewID returns a new message id from the process's generator and the
// wall clock (see IDGenerator). The Client uses it to make sends safe to
// retry.
func NewID() string {
	return processIDs.Next(time.Now().UnixMilli())
}
