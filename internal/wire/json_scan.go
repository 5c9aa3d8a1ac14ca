package wire

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// Single-pass scanning of JSON text: the fast paths of the strict decoder
// (fastValid) and of the client's answer decoder (SkipPlain).

// fastValid is prescan's fast path: one pass over the body, no tokens,
// no allocations in the common case. It returns true only for bodies
// prescan accepts; anything it is unsure of (an error to describe, an
// escaped key, an object with many keys) returns false, and prescanSlow,
// the reference, decides and words the error. So fastValid may be
// stricter than prescanSlow but never laxer (TestFastValidMatchesPrescan
// and FuzzFastValid check it).
func fastValid(body []byte) bool {
	ok, _, _ := fastScan(body, false)
	return ok
}

// fastScan is fastValid that can also split a batch body in the same
// pass: with collect, when the body is exactly {"messages":[…]}, items
// are the raw elements of the array (sub-slices of body) and itemsOK is
// true.
func fastScan(body []byte, collect bool) (ok bool, items [][]byte, itemsOK bool) {
	if !utf8.Valid(body) {
		return false, nil, false
	}
	s := vscanner{b: body, collect: collect}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false, nil, false
	}
	if !s.value(0) {
		return false, nil, false
	}
	s.ws()
	if s.i != len(s.b) {
		return false, nil, false
	}
	return true, s.items, s.found && s.topKeys == 1
}

// maxFastKeys bounds the keys of one object the fast path compares
// pairwise for duplicates; a larger object goes to prescanSlow's map, so
// a body of many keys can't make the check quadratic.
const maxFastKeys = 32

type vscanner struct {
	b    []byte
	i    int
	keys [][]byte // keys of the open objects, innermost last

	collect     bool     // split the top-level "messages" array
	collectNext bool     // the array about to be scanned is that one
	found       bool     // it was
	items       [][]byte // its elements
	topKeys     int      // keys of the top-level object
}

func (s *vscanner) ws() { s.i = skipWS(s.b, s.i) }

// value scans one value at s.i; depth is the number of open containers.
func (s *vscanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		if depth >= MaxDepth {
			return false
		}
		return s.object(depth + 1)
	case c == '[':
		if depth >= MaxDepth {
			return false
		}
		return s.array(depth + 1)
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	}
	return false
}

func (s *vscanner) lit(w string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		return false
	}
	s.i += len(w)
	return true
}

func (s *vscanner) object(depth int) bool {
	s.i++ // '{'
	base := len(s.keys)
	defer func() { s.keys = s.keys[:base] }()
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		k, ok := s.str()
		if !ok || bytes.IndexByte(k, '\\') >= 0 || len(s.keys)-base >= maxFastKeys {
			return false // an escaped key may equal another once unescaped: prescanSlow compares
		}
		for _, o := range s.keys[base:] {
			if bytes.Equal(o, k) {
				return false
			}
		}
		s.keys = append(s.keys, k)
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if depth == 1 {
			s.topKeys++
			if s.collect && string(k) == "messages" && s.i < len(s.b) && s.b[s.i] == '[' {
				s.collectNext = true
			}
		}
		if !s.value(depth) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

func (s *vscanner) array(depth int) bool {
	collect := s.collectNext
	s.collectNext = false
	if collect {
		s.found = true
		s.items = make([][]byte, 0, 128)
	}
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		start := s.i
		if !s.value(depth) {
			return false
		}
		if collect {
			s.items = append(s.items, s.b[start:s.i])
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// str scans a string at s.i and returns its raw contents (between the
// quotes, escapes not decoded). UTF-8 was checked for the whole body.
func (s *vscanner) str() ([]byte, bool) {
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		j = SkipPlain(s.b, j)
		if j >= len(s.b) {
			break
		}
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c < 0x20:
			return nil, false
		case c == '\\':
			j++
			if j >= len(s.b) {
				return nil, false
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				r, ok := hex4fast(s.b, j+1)
				if !ok {
					return nil, false
				}
				j += 4
				switch {
				case r >= 0xDC00 && r <= 0xDFFF:
					return nil, false // lone low surrogate
				case r >= 0xD800 && r <= 0xDBFF:
					// Must be followed by a low surrogate escape.
					if j+2 >= len(s.b) || s.b[j+1] != '\\' || s.b[j+2] != 'u' {
						return nil, false
					}
					lo, ok := hex4fast(s.b, j+3)
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return nil, false
					}
					j += 6
				}
			default:
				return nil, false
			}
		}
	}
	return nil, false
}

func hex4fast(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number scans a JSON number at s.i, rejecting negative zero ("-0",
// "-0.0e+0": a '-' and only the characters "-0.eE+") as prescan does.
func (s *vscanner) number() bool {
	start := s.i
	b := s.b
	i := s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	s.i = i
	if b[start] == '-' {
		negZero := true
		for _, c := range b[start:i] {
			if c != '-' && c != '0' && c != '.' && c != 'e' && c != 'E' && c != '+' {
				negZero = false
				break
			}
		}
		if negZero {
			return false
		}
	}
	return true
}

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
