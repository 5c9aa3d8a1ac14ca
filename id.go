package delayq

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// crockford is Crockford's base32 alphabet (no I, L, O, U); it sorts in
// byte order, so IDs made later compare greater as strings.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID returns a new message id: 26 characters of Crockford base32, a
// 48-bit Unix millisecond time followed by 80 random bits (the ULID layout).
// IDs made in a later millisecond sort after earlier ones; within one
// millisecond the order is random. Collisions are negligible (2^-80 per pair
// per millisecond). The Client uses it to make sends safe to retry.
//
// NewID is safe for concurrent use.
func NewID() string {
	return newIDAt(time.Now())
}

func newIDAt(t time.Time) string {
	var buf [26]byte
	ms := uint64(t.UnixMilli()) & (1<<48 - 1)
	for i := 9; i >= 0; i-- { // 10 chars = 50 bits, the top 2 always 0
		buf[i] = crockford[ms&31]
		ms >>= 5
	}
	var r [10]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	hi := uint64(binary.BigEndian.Uint16(r[:2]))
	lo := binary.BigEndian.Uint64(r[2:])
	// 80 bits = hi(16) | lo(64), written as 16 chars of 5 bits.
	for i := 25; i >= 10; i-- {
		buf[i] = crockford[lo&31]
		lo = lo>>5 | (hi&31)<<59
		hi >>= 5
	}
	return string(buf[:])
}
