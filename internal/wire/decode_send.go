package wire

import (
	"encoding/json"
	"strconv"
	"time"
)

// The send endpoints' fast paths. Sends are the API's hot path, so their
// bodies skip the reflective decoder when they are plain: each function
// here returns false on anything unusual (an unknown key, a wrong type,
// an escaped string, a bad value), and the caller then runs the generic
// decoder on the same bytes, which decides and words the error exactly
// as before. They only ever see prescanned bodies. Tests compare both
// decoders on random input (decode_send_test.go).

// batchItems returns the items of a prescanned {"messages":[…]} body, as
// sub-slices of body (the generic decoder copies each into a RawMessage).
func batchItems(body []byte) ([][]byte, bool) { return batchItemsOf(body, "messages") }

// decodeSendFast decodes one prescanned send object into in, which must
// be zero. On false, in is partly filled: reset it before decoding again.
func decodeSendFast(raw []byte, in *SendRequest) bool {
	return eachMember(raw, func(key, v []byte) bool { return decodeSendField(key, v, in) })
}

// eachMember calls f with each member's key (unquoted, unescaped) and raw
// value of a prescanned object, and reports false if raw is not an object
// or f does.
func eachMember(raw []byte, f func(key, v []byte) bool) bool {
	i := skipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	i = skipWS(raw, i+1)
	if raw[i] == '}' {
		return true
	}
	for {
		end := skipString(raw, i)
		key := raw[i+1 : end-1]
		i = skipWS(raw, end)
		i = skipWS(raw, i+1) // ':'
		vend := skipValue(raw, i)
		if !f(key, raw[i:vend]) {
			return false
		}
		i = skipWS(raw, vend)
		if raw[i] == '}' {
			return true
		}
		i = skipWS(raw, i+1) // ','
	}
}

// decodeSendField sets one member, as the generic decoder would: null
// leaves the field unset, strings without escapes need no decoder, and
// other leaves go through the same parsers encoding/json uses.
func decodeSendField(key, v []byte, in *SendRequest) bool {
	if string(v) == "null" {
		switch string(key) {
		case "id", "payload", "payload_base64", "payload_json", "headers", "delay", "delay_ms", "deliver_at", "max_attempts", "priority":
			return true
		}
		return false
	}
	switch string(key) {
	case "id":
		s, ok := plainString(v)
		in.ID = &s
		return ok
	case "payload", "payload_base64":
		return decodeFastPayload(key, v, in)
	case "payload_json":
		if in.fastPayload != nil {
			return false // two forms: the generic decoder words the error
		}
		in.PayloadJSON = append(json.RawMessage(nil), v...)
		return true
	case "headers":
		return json.Unmarshal(v, &in.Headers) == nil
	case "delay":
		s, ok := plainString(v)
		if !ok {
			return false
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return false
		}
		wd := Duration(d)
		in.Delay = &wd
		return true
	case "delay_ms":
		// ParseInt takes what encoding/json's int decoding takes from a
		// prescanned number: an integer in range, no fraction, no exponent.
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return false
		}
		in.DelayMS = &n
		return true
	case "deliver_at":
		var t time.Time
		if t.UnmarshalJSON(v) != nil {
			return false
		}
		in.DeliverAt = &t
		return true
	case "max_attempts":
		n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
		if err != nil {
			return false
		}
		m := int(n)
		in.MaxAttempts = &m
		return true
	case "priority":
		n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
		if err != nil {
			return false
		}
		m := int(n)
		in.Priority = &m
		return true
	}
	return false
}

// decodeFastPayload reads a "payload" or "payload_base64" string straight
// into the payload's bytes (SendRequest.fastPayload): one copy of a
// message's largest field, where a string and then its bytes were two
// (the base64 string of a 1 KiB payload was a tenth of the bytes a
// batched drain allocated). It gives up, for the generic decoder to decide
// and word the outcome as before, on escapes, on bad base64 and when the
// item gives a payload in more than one form.
func decodeFastPayload(key, v []byte, in *SendRequest) bool {
	raw, ok := plainBytes(v)
	if !ok || in.fastPayload != nil || in.Payload != nil || in.PayloadBase64 != nil || in.PayloadJSON != nil {
		return false
	}
	if string(key) == "payload" {
		in.fastPayload, in.fastPayloadBase64 = append(make([]byte, 0, len(raw)), raw...), false
		return true
	}
	p := make([]byte, strictBase64.DecodedLen(len(raw)))
	n, err := strictBase64.Decode(p, raw)
	if err != nil {
		return false
	}
	in.fastPayload, in.fastPayloadBase64 = p[:n], true
	return true
}

// DecodeSendItem decodes one item of a prescanned batch body (its errors
// named under path, such as "messages[3]"). DecodeStrict of a
// SendBatchRequest leaves the items raw: one malformed item must reject
// the whole batch, named, before any is used.
func DecodeSendItem(raw []byte, in *SendRequest, path string) error {
	return decodeSend(raw, in, path)
}

// decodeSend decodes a single send's body or a batch item (under path).
func decodeSend(raw []byte, in *SendRequest, path string) error {
	if decodeSendFast(raw, in) {
		return nil
	}
	*in = SendRequest{}
	return decodeValueAt(raw, in, path)
}

// decodeAckBatchFast decodes a prescanned batch ack body, the other half
// of a batched drain, when it is plain: {"acks":[…]} of objects whose
// members are "id" and "receipt" as strings without escapes. On false
// (anything else), in is left for the generic decoder, which decides and
// words the error as before.
func decodeAckBatchFast(body []byte, in *AckBatchRequest) bool {
	items, ok := batchItemsOf(body, "acks")
	if !ok {
		return false
	}
	acks := make([]AckItem, len(items))
	for i, raw := range items {
		if !decodeAckItemFast(raw, &acks[i]) {
			return false
		}
	}
	in.Acks = acks
	return true
}

// batchItemsOf returns the items of a prescanned {key:[…]} body, as
// sub-slices of body.
func batchItemsOf(body []byte, key string) ([][]byte, bool) {
	members, err := splitObject(body)
	if err != nil || len(members) != 1 || members[0].key != key {
		return nil, false
	}
	v := members[0].val
	if len(v) == 0 || v[0] != '[' {
		return nil, false
	}
	items, err := splitArray(v)
	return items, err == nil
}

func decodeAckItemFast(raw []byte, a *AckItem) bool {
	return eachMember(raw, func(key, v []byte) bool {
		s, ok := plainString(v)
		if !ok {
			return false
		}
		switch string(key) {
		case "id":
			a.ID = s
		case "receipt":
			a.Receipt = s
		default:
			return false
		}
		return true
	})
}
