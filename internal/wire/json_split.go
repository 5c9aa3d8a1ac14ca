package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
)

// The strict decoder walks objects and arrays itself so every error can
// name its path. Splitting them with encoding/json re-validated every
// subtree once per level (checkValid was a fifth of a batch send's CPU);
// prescan has already validated the whole body, so these splitters only
// find boundaries.

var errNotObject = errors.New("not a JSON object")

// member is one key and raw value of an object.
type member struct {
	key string
	val []byte
}

// splitObject returns the members of a prescanned JSON object.
func splitObject(raw []byte) ([]member, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '{' {
		return nil, errNotObject
	}
	var out []member
	i := skipWS(raw, 1)
	if raw[i] == '}' {
		return out, nil
	}
	for {
		end := skipString(raw, i)
		key, err := unquoteKey(raw[i:end])
		if err != nil {
			return nil, err
		}
		i = skipWS(raw, end)
		i = skipWS(raw, i+1) // ':'
		vend := skipValue(raw, i)
		out = append(out, member{key: key, val: raw[i:vend]})
		i = skipWS(raw, vend)
		if raw[i] == '}' {
			return out, nil
		}
		i = skipWS(raw, i+1) // ','
	}
}

// splitArray returns the elements of a prescanned JSON array.
func splitArray(raw []byte) ([][]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' {
		return nil, errors.New("not a JSON array")
	}
	var out [][]byte
	i := skipWS(raw, 1)
	if raw[i] == ']' {
		return out, nil
	}
	for {
		end := skipValue(raw, i)
		out = append(out, raw[i:end])
		i = skipWS(raw, end)
		if raw[i] == ']' {
			return out, nil
		}
		i = skipWS(raw, i+1)
	}
}

func unquoteKey(q []byte) (string, error) {
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] ('"').
func skipString(b []byte, i int) int {
	// Most strings have no escapes: find the closing quote with IndexByte
	// (vectorised), then walk byte by byte only if a backslash precedes it.
	if q := bytes.IndexByte(b[i+1:], '"'); q >= 0 && bytes.IndexByte(b[i+1:i+1+q], '\\') < 0 {
		return i + 1 + q + 1
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null
		j := i
	loop:
		for ; j < len(b); j++ {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				break loop
			}
		}
		return j
	}
}

var fieldCache sync.Map // reflect.Type → map[string]int

// cachedFields is jsonFields, computed once per type.
func cachedFields(t reflect.Type) map[string]int {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]int)
	}
	m := jsonFields(t)
	fieldCache.Store(t, m)
	return m
}
