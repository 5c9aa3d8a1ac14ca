package wire

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// DecodeSendBatchResponse decodes a batch-send answer without
// reflection, for the client. It takes only the plain form the server
// writes: exact field names, each once, no null, no escaped strings. On
// anything else it returns false and the caller decodes the same bytes
// with encoding/json, which is the reference (tests compare the two).
// Like json.Decoder.Decode it reads the first value and ignores the rest.
func DecodeSendBatchResponse(b []byte, out *SendBatchResponse) bool {
	if !utf8.Valid(b) { // encoding/json would substitute U+FFFD
		return false
	}
	p := parser{b: b}
	if !p.open('{') || !p.key("results") || !p.open('[') {
		return false
	}
	var res []BatchResult
	if !p.close(']') {
		res = make([]BatchResult, 0, 16)
		for {
			var r BatchResult
			if !p.result(&r) {
				return false
			}
			res = append(res, r)
			if p.close(']') {
				break
			}
			if !p.comma() {
				return false
			}
		}
	}
	if res == nil {
		res = []BatchResult{} // json: [] is an empty, non-nil slice
	}
	if !p.close('}') {
		return false
	}
	out.Results = res
	return true
}

type parser struct {
	b            []byte
	i            int
	topic, state string // the last seen, shared by the messages
}

func (p *parser) ws() { p.i = skipWS(p.b, p.i) }

// open consumes c ('{' or '[').
func (p *parser) open(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// close consumes c ('}' or ']') if it is next.
func (p *parser) close(c byte) bool { return p.open(c) }

func (p *parser) comma() bool { return p.open(',') }

// raw reads a string without escapes or control characters and returns
// its contents, not copied.
func (p *parser) raw() ([]byte, bool) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	j := SkipPlain(p.b, start)
	if j >= len(p.b) || p.b[j] != '"' {
		return nil, false // an escape or a control character: json decides
	}
	p.i = j + 1
	return p.b[start:j], true
}

func (p *parser) str() (string, bool) {
	s, ok := p.raw()
	return string(s), ok
}

// same reads a string that repeats across results (topic, state): one
// copy per answer, not one per message.
func (p *parser) same(last *string) (string, bool) {
	s, ok := p.raw()
	if ok && string(s) != *last {
		*last = string(s)
	}
	return *last, ok
}

// name reads a member name and its colon.
func (p *parser) name() ([]byte, bool) {
	k, ok := p.raw()
	if !ok || !p.open(':') {
		return nil, false
	}
	return k, true
}

// key reads the member name want and its colon.
func (p *parser) key(want string) bool {
	k, ok := p.name()
	return ok && string(k) == want
}

// num reads an integer that fits an int (what json takes into an int).
func (p *parser) num() (int, bool) {
	p.ws()
	j := p.i
	for j < len(p.b) && (p.b[j] == '-' || (p.b[j] >= '0' && p.b[j] <= '9')) {
		j++
	}
	if j == p.i || (j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E')) {
		return 0, false
	}
	s := p.b[p.i:j]
	// JSON numbers have no '+' and no leading zeros; ParseInt would take
	// "+1" and "01", so check the grammar's first digits here.
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || (s[0] == '0' && len(s) > 1) || s[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.b[p.i:j]), 10, strconv.IntSize)
	if err != nil {
		return 0, false
	}
	p.i = j
	return int(n), true
}

// time reads a time as time.Time.UnmarshalJSON takes it (a string).
func (p *parser) time() (time.Time, bool) {
	p.ws()
	start := p.i
	if _, ok := p.raw(); !ok {
		return time.Time{}, false
	}
	var t time.Time
	return t, t.UnmarshalJSON(p.b[start:p.i]) == nil
}

func (p *parser) boolean() (bool, bool) {
	p.ws()
	switch {
	case len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		return true, true
	case len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		return false, true
	}
	return false, false
}

// stringMap reads an object of strings (headers) with encoding/json: rare
// in answers, and its map semantics are json's to define.
func (p *parser) stringMap() (map[string]string, bool) {
	p.ws()
	start := p.i
	depth := 0
	for j := start; j < len(p.b); j++ {
		switch p.b[j] {
		case '"':
			for j++; j < len(p.b) && p.b[j] != '"'; j++ {
				if p.b[j] == '\\' {
					j++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				var m map[string]string
				if json.Unmarshal(p.b[start:j+1], &m) != nil || m == nil {
					return nil, false
				}
				p.i = j + 1
				return m, true
			}
		}
	}
	return nil, false
}

// object walks one JSON object: field is called with each key, the parser
// at its value; it returns false to reject the object.
func (p *parser) object(field func(k []byte) bool) bool {
	if !p.open('{') {
		return false
	}
	if p.close('}') {
		return true
	}
	for {
		k, ok := p.name()
		if !ok || !field(k) {
			return false
		}
		if p.close('}') {
			return true
		}
		if !p.comma() {
			return false
		}
	}
}

func (p *parser) result(r *BatchResult) bool {
	return p.object(func(k []byte) bool {
		switch {
		case string(k) == "message" && r.Message == nil:
			r.Message = &Message{}
			return p.message(r.Message)
		case string(k) == "error" && r.Error == nil:
			r.Error = &ErrorBody{}
			return p.errorBody(r.Error)
		default:
			return false
		}
	})
}

func (p *parser) errorBody(e *ErrorBody) bool {
	var seen uint8
	return p.object(func(k []byte) bool {
		var bit uint8
		var ok bool
		switch string(k) {
		case "code":
			bit = 1
			e.Code, ok = p.str()
		case "message":
			bit = 2
			e.Message, ok = p.str()
		case "field":
			bit = 4
			e.Field, ok = p.str()
		}
		if bit == 0 || seen&bit != 0 || !ok {
			return false
		}
		seen |= bit
		return true
	})
}

func (p *parser) message(m *Message) bool {
	var seen uint32
	return p.object(func(k []byte) bool {
		var bit uint32
		var ok bool
		switch string(k) {
		case "id":
			bit = 1 << 0
			m.ID, ok = p.str()
		case "topic":
			bit = 1 << 1
			m.Topic, ok = p.same(&p.topic)
		case "payload":
			bit = 1 << 2
			var s string
			s, ok = p.str()
			m.Payload = &s
		case "payload_base64":
			bit = 1 << 3
			var s string
			s, ok = p.str()
			m.PayloadBase64 = &s
		case "headers":
			bit = 1 << 4
			m.Headers, ok = p.stringMap()
		case "deliver_at":
			bit = 1 << 5
			m.DeliverAt, ok = p.time()
		case "state":
			bit = 1 << 6
			m.State, ok = p.same(&p.state)
		case "attempt":
			bit = 1 << 7
			m.Attempt, ok = p.num()
		case "failures":
			bit = 1 << 8
			m.Failures, ok = p.num()
		case "max_attempts":
			bit = 1 << 9
			m.MaxAttempts, ok = p.num()
		case "last_error":
			bit = 1 << 10
			m.LastError, ok = p.str()
		case "created_at":
			bit = 1 << 11
			m.CreatedAt, ok = p.time()
		case "updated_at":
			bit = 1 << 12
			m.UpdatedAt, ok = p.time()
		case "receipt":
			bit = 1 << 13
			m.Receipt, ok = p.str()
		case "lease_expires_at":
			bit = 1 << 14
			var t time.Time
			t, ok = p.time()
			m.LeaseExpiresAt = &t
		case "duplicate":
			bit = 1 << 15
			m.Duplicate, ok = p.boolean()
		case "priority":
			bit = 1 << 16
			m.Priority, ok = p.num()
		}
		if bit == 0 || seen&bit != 0 || !ok {
			return false
		}
		seen |= bit
		return true
	})
}
