package wire

import "encoding/binary"

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// SkipPlain returns the index of the first byte at or after i that ends a
// plain run inside a JSON string — a quote, a backslash or a control
// character — or len(b). It tests eight bytes at a time: string scanning
// is most of the work of checking a batch body (payloads are long runs).
func SkipPlain(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ ('"' * ones)
		s := x ^ ('\\' * ones)
		// A byte is zero (or below 0x20) iff the subtraction borrows into
		// its high bit while its own high bit was clear: exact per word.
		if ((q-ones)&^q|(s-ones)&^s|(x-0x20*ones)&^x)&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}
