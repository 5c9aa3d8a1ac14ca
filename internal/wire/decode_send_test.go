package wire

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeSendFastMatchesGeneric checks the hand-written send decoder
// against the reflective one on random items: equal results when it
// decodes, and it gives up (so the generic one words the error) whenever
// the generic one fails.
func TestDecodeSendFastMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	fast := 0
	for range 20000 {
		item := []byte(randomItem(r))
		if prescan(item) != nil && item[0] == '{' {
			continue // decoders only ever see prescanned input
		}
		if checkSendFast(t, item) {
			fast++
		}
	}
	if fast < 2000 {
		t.Fatalf("the fast decoder took only %d of 20000 items: the comparison is too thin", fast)
	}
	for _, s := range scanSeeds {
		if prescan([]byte(s)) == nil {
			checkSendFast(t, []byte(s))
		}
	}
}

func checkSendFast(t *testing.T, item []byte) bool {
	t.Helper()
	var fast, generic SendRequest
	ok := decodeSendFast(item, &fast)
	err := decodeValueAt(item, &generic, "messages[0]")
	if ok && err != nil {
		t.Fatalf("%s: fast decoder accepts, generic says %v", item, err)
	}
	if !ok {
		return false
	}
	fastDomain, fastErr := fast.ToDomain()
	genericDomain, genericErr := generic.ToDomain()
	if fmt.Sprint(fastErr) != fmt.Sprint(genericErr) || !reflect.DeepEqual(fastDomain, genericDomain) {
		t.Fatalf("%s: as the domain's, fast %+v (%v), generic %+v (%v)", item, fastDomain, fastErr, genericDomain, genericErr)
	}
	// The payload read straight into bytes is the string the generic
	// decoder keeps, decoded.
	if fast.fastPayload != nil {
		s := string(fast.fastPayload)
		if fast.fastPayloadBase64 {
			s = base64.StdEncoding.EncodeToString(fast.fastPayload)
			fast.PayloadBase64 = &s
		} else {
			fast.Payload = &s
		}
		fast.fastPayload, fast.fastPayloadBase64 = nil, false
	}
	if !reflect.DeepEqual(fast, generic) {
		t.Fatalf("%s: fast %s, generic %s", item, dumpSend(&fast), dumpSend(&generic))
	}
	return true
}

// TestFastPayloadOneForm: a payload given in two forms in one item, in
// either order, is left to the generic decoder, which refuses it by name.
func TestFastPayloadOneForm(t *testing.T) {
	for _, item := range []string{
		`{"payload":"x","payload_json":{"a":1}}`,
		`{"payload_json":{"a":1},"payload":"x"}`,
		`{"payload_base64":"eA==","payload_json":[1]}`,
		`{"payload_json":[1],"payload_base64":"eA=="}`,
		`{"payload":"x","payload_base64":"eA=="}`,
	} {
		var in SendRequest
		if decodeSendFast([]byte(item), &in) {
			t.Errorf("%s: the fast decoder took two payload forms", item)
		}
		in = SendRequest{}
		if err := decodeSend([]byte(item), &in, "messages[0]"); err != nil {
			t.Fatal(err)
		}
		if _, err := in.ToDomain(); err == nil || !strings.Contains(err.Error(), "payload") {
			t.Errorf("%s: ToDomain = %v, want an error naming the payload", item, err)
		}
	}
	var in SendRequest
	if !decodeSendFast([]byte(`{"payload_base64":"AAECAwQF/w=="}`), &in) || string(in.fastPayload) != "\x00\x01\x02\x03\x04\x05\xff" || in.Payload != nil || in.PayloadBase64 != nil {
		t.Fatalf("payload_base64 read as %q (fast %v)", in.fastPayload, in.fastPayloadBase64)
	}
}

func dumpSend(s *SendRequest) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestBatchItemsMatchesGeneric compares the batch splitter with the
// generic decode of SendBatchRequest.
func TestBatchItemsMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	bodies := []string{`{"messages":[]}`, `{"messages":[{"payload":"x"}],"messages":[]}`, `{"messages":[[1,2],{"a":[3]}]}`, `{"messages":null}`, `{"messages":5}`, `{"messages":[1, "x" ,null]}`, `{"x":1,"messages":[]}`, `{ "messages" : [ {} , {"a":1} ] }`}
	for range 2000 {
		bodies = append(bodies, randomBody(r))
	}
	for _, s := range bodies {
		b := []byte(s)
		if prescan(b) != nil {
			continue
		}
		var in SendBatchRequest
		err := decodeValue(b, reflect.ValueOf(&in).Elem(), "") // the generic decoder alone
		split, ok := batchItems(b)
		valid, scanned, scannedOK := fastScan(b, true)
		if valid && scannedOK != ok {
			t.Fatalf("%s: fastScan splits %v, batchItems %v", s, scannedOK, ok)
		}
		for k, items := range [][][]byte{split, scanned} {
			if !ok || (k == 1 && !(valid && scannedOK)) {
				continue
			}
			if err != nil {
				t.Fatalf("%s: the splitters accept, generic says %v", s, err)
			}
			if len(items) != len(in.Messages) {
				t.Fatalf("%s: %d items, generic %d", s, len(items), len(in.Messages))
			}
			for i := range items {
				if string(items[i]) != string(in.Messages[i]) {
					t.Fatalf("%s: item %d %q, generic %q", s, i, items[i], in.Messages[i])
				}
			}
		}
	}
}

// FuzzSendDecoders compares the send fast paths with the generic decoder
// on arbitrary prescanned bodies: the fast decoder decodes to the same
// value or gives up, and the batch splitters agree with it.
func FuzzSendDecoders(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	r := rand.New(rand.NewPCG(13, 14))
	for range 50 {
		f.Add([]byte(randomBody(r)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if prescan(b) != nil {
			return
		}
		checkSendFast(t, b)
		var in SendBatchRequest
		err := decodeValue(b, reflect.ValueOf(&in).Elem(), "")
		valid, items, itemsOK := fastScan(b, true)
		split, splitOK := batchItems(b)
		if valid && itemsOK != splitOK {
			t.Fatalf("fastScan splits %v, batchItems %v", itemsOK, splitOK)
		}
		if !splitOK {
			return
		}
		if err != nil {
			t.Fatalf("the splitters accept, generic says %v", err)
		}
		splits := [][][]byte{split}
		if valid && itemsOK {
			splits = append(splits, items)
		}
		for _, got := range splits {
			if len(got) != len(in.Messages) {
				t.Fatalf("%d items, generic %d", len(got), len(in.Messages))
			}
			for i := range got {
				if string(got[i]) != string(in.Messages[i]) {
					t.Fatalf("item %d %q, generic %q", i, got[i], in.Messages[i])
				}
				checkSendFast(t, got[i])
			}
		}
	})
}

// TestDecodeAckBatchFastMatchesGeneric checks the batch ack fast path
// against the reflective decoder on random bodies: equal results when it
// decodes, and it gives up whenever the generic one fails.
func TestDecodeAckBatchFastMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	keys := []string{`"id"`, `"receipt"`, `"ID"`, `"x"`, `"\u0069d"`, `"acks"`}
	vals := []string{`"m-1"`, `"tok-2"`, `""`, `null`, `1`, `"a\"b"`, `"\u00e9"`, `"é"`, `["x"]`, `{}`, `true`}
	item := func() string {
		switch r.IntN(12) {
		case 0:
			return `null`
		case 1:
			return `"x"`
		}
		var b []byte
		b = append(b, '{')
		for j := range r.IntN(4) {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, keys[r.IntN(len(keys))]...)
			b = append(b, ':')
			b = append(b, vals[r.IntN(len(vals))]...)
		}
		return string(append(b, '}'))
	}
	bodies := []string{`{"acks":[]}`, `{"acks":null}`, `{"acks":{}}`, `{}`, `{"acks":[],"x":1}`, ` { "acks" : [ { "id" : "a" , "receipt" : "b" } ] } `}
	for range 20000 {
		var b []byte
		b = append(b, `{"acks":[`...)
		for j := range r.IntN(4) {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, item()...)
		}
		b = append(b, "]}"...)
		bodies = append(bodies, string(b))
	}
	fastN := 0
	for _, s := range bodies {
		body := []byte(s)
		if prescan(body) != nil {
			continue // decoders only ever see prescanned input
		}
		var fast, generic AckBatchRequest
		ok := decodeAckBatchFast(body, &fast)
		err := decodeValue(body, reflect.ValueOf(&generic).Elem(), "")
		if !ok {
			continue
		}
		fastN++
		if err != nil {
			t.Fatalf("%s: fast decoder accepts, generic says %v", s, err)
		}
		if !reflect.DeepEqual(fast, generic) {
			t.Fatalf("%s: fast %+v, generic %+v", s, fast, generic)
		}
	}
	if fastN < 1000 {
		t.Fatalf("the fast decoder took only %d bodies: the comparison is too thin", fastN)
	}
}
