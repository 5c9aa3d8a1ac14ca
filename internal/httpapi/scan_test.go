package httpapi

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// scanSeeds are bodies on the edges of what prescan accepts.
var scanSeeds = []string{
	`{}`, ` {} `, "{\t\"a\"\n:\r1}", `{"a":1,"b":[1,2,{"c":null}],"d":true,"e":false}`,
	`{"a":"x","a":"y"}`, `{"a":"x","\u0061":"y"}`, `{"a\u0062":1}`, `{"a":{"a":{"a":1}},"b":{"a":2}}`,
	`{"a":-0}`, `{"a":-0.0}`, `{"a":-0e5}`, `{"a":-0.0e+0}`, `{"a":0}`, `{"a":-1}`, `{"a":1.5e-3}`,
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":+1}`, `{"a":--1}`, `{"a":1e+}`, `{"a":-}`,
	`{"a":"\ud800"}`, `{"a":"\ud800\udc00"}`, `{"a":"\udc00"}`, `{"a":"\ud800\u0041"}`, `{"a":"\ud800x"}`,
	`{"a":"\uD83D\uDE00"}`, `{"a":"\u00e9\/\b\f\n\r\t\"\\"}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`,
	"{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", "{\"a\":\"é\"}", `{"a":tru}`, `{"a":truex}`, `{"a":nul}`,
	`{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`,
	`{"a":1}x`, `{"a":1}{}`, `{"a":1} `, `[]`, `"x"`, `1`, `null`, `{`, `{"a"`, `{"a":`, `{"a":"`,
	`{"a":"x\"}`, `{"a":[}`, `{"a":{]}`, "\ufeff{}", `{"":1}`, `{"a":1,"":2,"":3}`,
	`{"a":` + strings.Repeat(`[`, 31) + strings.Repeat(`]`, 31) + `}`,
	`{"a":` + strings.Repeat(`[`, 32) + strings.Repeat(`]`, 32) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, 30) + `1` + strings.Repeat(`}`, 30) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, 31) + `1` + strings.Repeat(`}`, 31) + `}`,
	`{"h":{` + manyHeaders(40) + `}}`, `{"h":{` + manyHeaders(40) + `,"h3":"v"}}`,
	`{"messages":[{"payload":"x","delay":"1h"},{"id":"a","payload_base64":"eA==","delay_ms":5}]}`,
}

func checkFastValid(t *testing.T, body []byte) {
	t.Helper()
	fast := fastValid(body)
	slow := prescanSlow(body)
	if fast && slow != nil {
		t.Fatalf("fastValid accepts %q, prescan rejects it: %v", body, slow)
	}
}

// TestFastValidMatchesPrescan checks that the fast path never accepts a
// body the reference prescan rejects, and that it accepts the plain ones
// (else it would not be a fast path).
func TestFastValidMatchesPrescan(t *testing.T) {
	for _, s := range scanSeeds {
		checkFastValid(t, []byte(s))
	}
	// Every prefix of the seeds: truncations at every byte.
	for _, s := range scanSeeds {
		for i := range len(s) {
			checkFastValid(t, []byte(s[:i]))
		}
	}
	for _, s := range []string{`{}`, `{"a":1,"b":[1,2,{"c":null}],"d":true,"e":false}`, `{"a":-1}`, `{"a":"\uD83D\uDE00"}`,
		`{"a":` + strings.Repeat(`[`, 31) + strings.Repeat(`]`, 31) + `}`, `{"a":-0e5}`, `{"":1}`} {
		if !fastValid([]byte(s)) {
			t.Errorf("fastValid rejects %q", s)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		b := []byte(randomBody(r))
		if !fastValid(b) && !strings.Contains(string(b), `\\u0000"`) { // escaped keys take the slow path by design
			if err := prescanSlow(b); err == nil {
				t.Fatalf("fastValid rejects a plain body prescan accepts: %q", b)
			}
		}
		// Mutations: one byte changed, dropped or doubled.
		for range 5 {
			m := mutate(r, b)
			checkFastValid(t, m)
		}
	}
}

func FuzzFastValid(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkFastValid(t, b) })
}

const mutateAlphabet = "{}[]\":,\\ -0.eE+1uU9aAdD\x00\xff"

func mutate(r *rand.Rand, b []byte) []byte {
	m := append([]byte(nil), b...)
	if len(m) == 0 {
		return m
	}
	i := r.IntN(len(m))
	switch r.IntN(3) {
	case 0:
		m[i] = mutateAlphabet[r.IntN(len(mutateAlphabet))]
	case 1:
		m = append(m[:i], m[i+1:]...)
	default:
		m = append(m[:i+1], m[i:]...)
	}
	return m
}

// randomBody is a random send or batch body, mostly valid, with the
// fields and value kinds the API sees.
func randomBody(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return randomItem(r)
	}
	n := 1 + r.IntN(5)
	items := make([]string, n)
	for i := range items {
		items[i] = randomItem(r)
	}
	return `{"messages":[` + strings.Join(items, ",") + `]}`
}

var (
	randStrings = []string{``, `x`, `order-42`, `a b`, `\"q\"`, `\\`, `\n`, `\u00e9`, `\uD83D\uDE00`, `é`, `<&>`, `\u2028`, `\/`, `30s`, `{x}`}
	randNums    = []string{`0`, `1`, `-1`, `5`, `1.5`, `1e3`, `-0`, `9223372036854775807`, `9223372036854775808`, `2147483648`, `1E2`, `-5e-1`}
	randFields  = []string{"id", "payload", "payload_base64", "headers", "delay", "delay_ms", "deliver_at", "max_attempts"}
)

func randomLeaf(r *rand.Rand, field string) string {
	switch r.IntN(12) {
	case 0:
		return `null`
	case 1:
		return randNums[r.IntN(len(randNums))]
	case 2:
		return `"` + randStrings[r.IntN(len(randStrings))] + `"`
	case 3:
		return []string{`true`, `false`, `[]`, `{}`, `["x"]`}[r.IntN(5)]
	}
	switch field {
	case "delay":
		return `"` + []string{"1h", "30s", "1500ms", "-1s", "0s", "2h30m", "soon", "1e309s", "100000h"}[r.IntN(9)] + `"`
	case "delay_ms", "max_attempts":
		return randNums[r.IntN(len(randNums))]
	case "deliver_at":
		return `"` + []string{"2030-01-02T15:04:05Z", "2030-01-02T15:04:05.123+02:00", "tomorrow", "0001-01-01T00:00:00Z", "2030-13-01T00:00:00Z"}[r.IntN(5)] + `"`
	case "payload_base64":
		return `"` + []string{"eA==", "eA", "!!!", ""}[r.IntN(4)] + `"`
	case "headers":
		return []string{`{"k":"v"}`, `{"a":"1","b":"2"}`, `{"a":1}`, `{}`, `{"":"v"}`, `{"k":null}`}[r.IntN(6)]
	}
	return `"` + randStrings[r.IntN(len(randStrings))] + `"`
}

func randomItem(r *rand.Rand) string {
	if r.IntN(40) == 0 {
		return []string{`5`, `null`, `"x"`, `[]`}[r.IntN(4)]
	}
	n := r.IntN(5)
	parts := make([]string, 0, n+1)
	used := map[string]bool{}
	for range n {
		f := randFields[r.IntN(len(randFields))]
		if r.IntN(30) == 0 {
			f = []string{"dealy", "Delay", "payload\\u0000", "x"}[r.IntN(4)]
		}
		if used[f] && r.IntN(10) != 0 {
			continue
		}
		used[f] = true
		parts = append(parts, fmt.Sprintf(`%q:%s`, f, randomLeaf(r, f)))
	}
	if !used["payload"] && r.IntN(5) != 0 {
		parts = append(parts, `"payload":"`+randStrings[r.IntN(len(randStrings))]+`"`)
	}
	r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	sep := []string{",", ", ", " ,\n"}[r.IntN(3)]
	return "{" + strings.Join(parts, sep) + "}"
}

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
	var fast, generic wire.SendRequest
	ok := decodeSendFast(item, &fast)
	err := decodeValueAt(item, &generic, "messages[0]")
	if ok && err != nil {
		t.Fatalf("%s: fast decoder accepts, generic says %v", item, err)
	}
	if ok && !reflect.DeepEqual(fast, generic) {
		t.Fatalf("%s: fast %s, generic %s", item, dumpSend(&fast), dumpSend(&generic))
	}
	return ok
}

func dumpSend(s *wire.SendRequest) string {
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
		var in wire.SendBatchRequest
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
		var in wire.SendBatchRequest
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

// TestWriteSendBatchMatchesWriteJSON checks that the hand-written answer
// goes out exactly as writeJSON would send it: status, headers, bytes.
func TestWriteSendBatchMatchesWriteJSON(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	p := "dup <payload>"
	out := wire.SendBatchResponse{Results: []wire.BatchResult{
		{Message: &wire.Message{ID: "a", Topic: "t", DeliverAt: at, State: "scheduled", MaxAttempts: 5, CreatedAt: at, UpdatedAt: at}},
		{Message: &wire.Message{ID: "b", Topic: "t", Payload: &p, DeliverAt: at, State: "ready", CreatedAt: at, UpdatedAt: at, Duplicate: true}},
		{Error: &wire.ErrorBody{Code: wire.CodeTooLarge, Message: "payload is 5 bytes, the limit is 4"}},
	}}
	fast, ref := httptest.NewRecorder(), httptest.NewRecorder()
	if !writeSendBatch(fast, &out) {
		t.Fatal("writeSendBatch refused")
	}
	writeJSON(ref, http.StatusOK, out)
	if fast.Code != ref.Code || !reflect.DeepEqual(fast.Header(), ref.Header()) || fast.Body.String() != ref.Body.String() {
		t.Fatalf("fast %d %v %q\nref  %d %v %q", fast.Code, fast.Header(), fast.Body, ref.Code, ref.Header(), ref.Body)
	}
}
