package engine

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
)

// crockford is Crockford's base32 alphabet: sortable, no I/L/O/U.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// idGen makes ULID-shaped ids: 48 bits of Unix ms then 80 bits that are
// random at each new millisecond and incremented within one, so ids sort
// by creation time, also within a millisecond.
type idGen struct {
	mu     sync.Mutex
	lastMS int64
	hi     uint16 // top 16 of the 80 entropy bits
	lo     uint64 // low 64
}

func (g *idGen) next(ms int64) string {
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
		_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
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

// token returns a random string for receipts.
func token() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	const hex = "0123456789abcdef"
	out := make([]byte, 16)
	for i, c := range b {
		out[2*i], out[2*i+1] = hex[c>>4], hex[c&15]
	}
	return string(out)
}
