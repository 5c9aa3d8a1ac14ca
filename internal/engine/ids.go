package engine

import (
	"crypto/rand"
)

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
