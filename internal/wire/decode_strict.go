package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/domain"
)

// The strict request decoder: what the API accepts as a JSON body. Its
// fast paths (json_scan.go, decode_send.go) only ever accept what this
// reference accepts, and decode to the same values.

// MaxDepth bounds JSON nesting. The deepest valid body (a batch item's
// headers) is 4 levels; 32 leaves room and rejects 10k-deep attacks long
// before encoding/json's own limit of 10000.
const MaxDepth = 32

// DecodeStrict decodes one JSON object into v (a pointer to a struct),
// strictly: the body must be valid UTF-8 with no lone surrogate escapes,
// one object with nothing after it, no duplicate keys, no "-0", at most
// MaxDepth deep, and every key must be a field of v (recursively). Errors
// are *domain.InvalidError naming the offending field by path, such as
// "messages[3].delay". An empty body decodes as {} when allowEmpty.
func DecodeStrict(body []byte, v any, allowEmpty bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return domain.Invalid("", "the request body is empty; want a JSON object")
	}
	if in, ok := v.(*SendBatchRequest); ok {
		// The hot path (see decode_send.go): validated and split in one pass.
		ok, items, itemsOK := fastScan(body, true)
		if !ok {
			if err := prescanSlow(body); err != nil {
				return err
			}
			items, itemsOK = batchItems(body)
		}
		if itemsOK {
			in.Messages = make([]json.RawMessage, len(items))
			for i, it := range items {
				in.Messages[i] = it
			}
			return nil
		}
		return decodeValue(body, reflect.ValueOf(v).Elem(), "")
	}
	if err := prescan(body); err != nil {
		return err
	}
	if in, ok := v.(*SendRequest); ok {
		return decodeSend(body, in, "")
	}
	if in, ok := v.(*AckBatchRequest); ok && decodeAckBatchFast(body, in) {
		return nil
	}
	return decodeValue(body, reflect.ValueOf(v).Elem(), "")
}

// prescan checks what encoding/json accepts silently: invalid UTF-8 and
// lone surrogates (both turned into U+FFFD), duplicate keys (last wins),
// trailing data and "-0"; and it bounds nesting. Valid bodies take
// fastValid's single pass; the rest go to prescanSlow, which finds and
// words the error.
func prescan(body []byte) error {
	if fastValid(body) {
		return nil
	}
	return prescanSlow(body)
}

// prescanSlow is the reference prescan, on encoding/json's tokenizer.
func prescanSlow(body []byte) error {
	if !utf8.Valid(body) {
		return domain.Invalid("", "the body is not valid UTF-8")
	}
	if err := checkSurrogates(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object    bool
		expectKey bool
		keys      map[string]bool
		path      string
		key       string // the last key (objects) …
		index     int    // … or the next index (arrays)
	}
	var stack []*frame
	here := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.object {
			return joinPath(f.path, f.key)
		}
		return f.path + "[" + strconv.Itoa(f.index) + "]"
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) == 0 {
				return domain.Invalid("", "the request body is empty; want a JSON object")
			}
			return domain.Invalid("", "the JSON is truncated")
		}
		if err != nil {
			return jsonSyntaxError(err)
		}
		if len(stack) == 0 && tok != json.Delim('{') {
			return domain.Invalid("", "the body must be a JSON object")
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				// empty object or after a value: close below
			} else {
				k := tok.(string) // encoding/json guarantees a string here
				if top.keys[k] {
					return domain.Invalid(joinPath(top.path, k), "is given twice")
				}
				top.keys[k] = true
				top.key = k
				top.expectKey = false
				continue
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= MaxDepth {
					return domain.Invalid(here(), "nests deeper than %d levels", MaxDepth)
				}
				stack = append(stack, &frame{object: t == '{', expectKey: t == '{', keys: map[string]bool{}, path: here()})
				continue
			case '}', ']':
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					if _, err := dec.Token(); err != io.EOF {
						return domain.Invalid("", "unexpected data after the JSON object")
					}
					return nil
				}
			}
		case json.Number:
			if strings.HasPrefix(string(t), "-") && strings.Trim(string(t), "-0.eE+") == "" {
				return domain.Invalid(here(), "is negative zero")
			}
		}
		// A value ended: advance the enclosing container.
		top = stack[len(stack)-1]
		if top.object {
			top.expectKey = true
		} else {
			top.index++
		}
	}
}

// checkSurrogates rejects \uD800–\uDFFF escapes that are not a high/low
// pair. In valid JSON a backslash only occurs inside strings, so a plain
// scan over escapes is exact (syntax errors are caught by the decoder).
func checkSurrogates(b []byte) error {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // skip the escaped character (it may be a backslash)
			continue
		}
		r, ok := hex4(b, i+2)
		switch {
		case !ok:
			return nil // malformed escape: the decoder reports it
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := hex4(b, i+8); !ok || b[i+6] != '\\' || b[i+7] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
				return domain.Invalid("", "the JSON has a lone surrogate escape \\u%04x", r)
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return domain.Invalid("", "the JSON has a lone surrogate escape \\u%04x", r)
		default:
			i += 5
		}
	}
	return nil
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return rune(n), err == nil
}

func jsonSyntaxError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return domain.Invalid("", "invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return domain.Invalid("", "the JSON is truncated")
	}
	return domain.Invalid("", "invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// decodeValueAt decodes one already-prescanned item of a larger body
// (a batch element) into v, naming errors under path.
func decodeValueAt(raw []byte, v any, path string) error {
	return decodeValue(raw, reflect.ValueOf(v).Elem(), path)
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	stringType      = reflect.TypeFor[string]()
	stringPtrType   = reflect.TypeFor[*string]()
)

// walkable reports whether decodeValue walks t field by field: a struct
// that does not decode itself (time.Time does, so it is a leaf).
func walkable(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

// decodeValue decodes raw into rv, walking structs (and slices of them)
// field by field so every error names its path. The input passed prescan,
// so it is syntactically valid.
func decodeValue(raw []byte, rv reflect.Value, path string) error {
	if string(raw) == "null" {
		return nil // leaves pointers nil and values zero
	}
	t := rv.Type()
	switch {
	case t.Kind() == reflect.Pointer && walkable(t.Elem()):
		rv.Set(reflect.New(t.Elem()))
		return decodeValue(raw, rv.Elem(), path)
	case walkable(t):
		return decodeStruct(raw, rv, path)
	case t.Kind() == reflect.Slice && walkable(t.Elem()):
		items, err := splitArray(raw)
		if err != nil {
			return domain.Invalid(path, "must be a JSON array")
		}
		rv.Set(reflect.MakeSlice(t, len(items), len(items)))
		for i, it := range items {
			if err := decodeValue(it, rv.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		return nil
	}
	if s, ok := plainString(raw); ok {
		// The common leaf (ids, payloads): a string with no escapes, whose
		// UTF-8 prescan has checked, needs no decoder.
		switch t {
		case stringType: // exactly string: named types may decode themselves
			rv.SetString(s)
			return nil
		case stringPtrType:
			rv.Set(reflect.ValueOf(&s))
			return nil
		}
	}
	if err := json.Unmarshal(raw, rv.Addr().Interface()); err != nil {
		return leafError(err, path, t)
	}
	return nil
}

// plainString returns the contents of a JSON string without escapes.
func plainString(raw []byte) (string, bool) {
	b, ok := plainBytes(raw)
	return string(b), ok
}

// plainBytes returns the contents of a JSON string without escapes as a
// sub-slice of raw (nothing copied).
func plainBytes(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || bytes.IndexByte(raw, '\\') >= 0 {
		return nil, false
	}
	return raw[1 : len(raw)-1], true
}

func decodeStruct(raw []byte, rv reflect.Value, path string) error {
	members, err := splitObject(raw)
	if err != nil {
		return domain.Invalid(path, "must be a JSON object")
	}
	// Sorted by key: the first error is always the same one (prescan
	// rejected duplicate keys, so keys are unique).
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	fields := cachedFields(rv.Type())
	for _, m := range members {
		i, ok := fields[m.key]
		if !ok {
			return domain.Invalid(joinPath(path, m.key), "is not a known field")
		}
		if err := decodeValue(m.val, rv.Field(i), joinPath(path, m.key)); err != nil {
			return err
		}
	}
	return nil
}

// jsonFields maps a struct's JSON names to field indexes (exact names:
// unlike encoding/json, "Delay" does not match "delay").
func jsonFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = i
	}
	return m
}

// leafError turns an encoding/json error about one value into a 400 that
// names it.
func leafError(err error, path string, t reflect.Type) error {
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	switch {
	case errors.As(err, &te):
		return domain.Invalid(path, "must be %s, got a JSON %s", describe(t), te.Value)
	case errors.As(err, &pe), t == reflect.TypeFor[time.Time](), t == reflect.TypeFor[*time.Time]():
		return domain.Invalid(path, "must be an RFC 3339 time such as \"2030-01-02T15:04:05Z\"")
	}
	return domain.Invalid(path, "%s", strings.TrimPrefix(err.Error(), "json: "))
}

func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Map:
		return "an object of strings"
	case reflect.Slice:
		return "an array"
	}
	return "a " + t.String()
}
