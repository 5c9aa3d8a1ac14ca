package wire

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

func randText(r *rand.Rand) string {
	const alphabet = "ab\"\\\n\t\r\b\f\x01\x1f<>&é\u2028\u2029\x7f/µ😀"
	rs := []rune(alphabet)
	var sb strings.Builder
	for range r.IntN(8) {
		if r.IntN(10) == 0 {
			sb.WriteByte("\xff\xc3\xe2"[r.IntN(3)])
			continue
		}
		sb.WriteRune(rs[r.IntN(len(rs))])
	}
	return sb.String()
}

func randTime(r *rand.Rand) time.Time {
	base := time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)
	t := base.Add(time.Duration(r.Int64N(1e15)))
	if r.IntN(3) == 0 {
		t = t.In(time.FixedZone("x", 3600*r.IntN(5)+60*r.IntN(2)*30))
	}
	return t
}

// TestAppendMatchesJSON compares the hand-written encoders with
// encoding/json, byte for byte, on random values.
func TestAppendMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 3000 {
		n := r.IntN(4)
		res := SendBatchResponse{Results: make([]BatchResult, n)}
		reqs := make([]*SendRequest, n)
		for i := range res.Results {
			reqs[i] = randSendRequest(r)
			if r.IntN(5) == 0 {
				res.Results[i].Error = &ErrorBody{Code: CodeConflict, Message: randText(r), Field: []string{"", "id"}[r.IntN(2)]}
				if r.IntN(3) != 0 {
					continue
				}
			}
			if r.IntN(10) == 0 {
				continue // neither: {}
			}
			m := &Message{ID: randText(r), Topic: randText(r), DeliverAt: randTime(r),
				State: "scheduled", Attempt: r.IntN(3), Failures: r.IntN(2), MaxAttempts: r.IntN(10) - 2,
				LastError: []string{"", "boom\n"}[r.IntN(2)], CreatedAt: randTime(r), UpdatedAt: randTime(r),
				Receipt: []string{"", "rcpt"}[r.IntN(2)], Duplicate: r.IntN(2) == 0}
			switch r.IntN(3) {
			case 0:
				m.Headers = map[string]string{"b": randText(r), "a": "1", randText(r): randText(r)}
			case 1:
				m.Headers = map[string]string{}
			}
			switch r.IntN(3) {
			case 0:
				p := randText(r)
				m.Payload = &p
			case 1:
				p := "eA=="
				m.PayloadBase64 = &p
			}
			if r.IntN(3) == 0 {
				le := randTime(r)
				m.LeaseExpiresAt = &le
			}
			res.Results[i].Message = m
		}
		if r.IntN(20) == 0 {
			res.Results = nil
		}
		want, err := json.Marshal(&res)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := AppendSendBatchResponse(nil, &res)
		if !ok || string(got) != string(want) {
			t.Fatalf("answer: ok %v\ngot  %s\nwant %s", ok, got, want)
		}

		body := struct {
			Messages []*SendRequest `json:"messages"`
		}{Messages: reqs}
		if r.IntN(20) == 0 {
			body.Messages = nil
		}
		want, err = json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		got, ok = AppendSendBatchRequest(nil, body.Messages)
		if !ok || string(got) != string(want) {
			t.Fatalf("request: ok %v\ngot  %s\nwant %s", ok, got, want)
		}
	}
	// A time JSON can't carry: the appenders refuse, like json.Marshal.
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := AppendSendBatchResponse(nil, &SendBatchResponse{Results: []BatchResult{{Message: &Message{DeliverAt: far}}}}); ok {
		t.Fatal("year 10000 encoded in an answer")
	}
	if _, ok := AppendSendBatchRequest(nil, []*SendRequest{{DeliverAt: &far}}); ok {
		t.Fatal("year 10000 encoded in a request")
	}
}

func randSendRequest(r *rand.Rand) *SendRequest {
	if r.IntN(30) == 0 {
		return nil
	}
	s := &SendRequest{}
	if r.IntN(2) == 0 {
		id := randText(r)
		s.ID = &id
	}
	switch r.IntN(3) {
	case 0:
		p := randText(r)
		s.Payload = &p
	case 1:
		p := "eA=="
		s.PayloadBase64 = &p
	}
	switch r.IntN(3) {
	case 0:
		s.Headers = map[string]string{randText(r): randText(r), "k": "v"}
	case 1:
		s.Headers = map[string]string{}
	}
	switch r.IntN(4) {
	case 0:
		d := Duration(r.Int64N(1e14) - 1e12)
		s.Delay = &d
	case 1:
		ms := r.Int64N(1e9) - 10
		s.DelayMS = &ms
	case 2:
		t := randTime(r)
		s.DeliverAt = &t
	}
	if r.IntN(2) == 0 {
		n := r.IntN(100) - 5
		s.MaxAttempts = &n
	}
	return s
}

func BenchmarkAppendSendBatchRequest(b *testing.B) {
	msgs := benchRequests()
	var buf []byte
	for b.Loop() {
		buf, _ = AppendSendBatchRequest(buf[:0], msgs)
	}
}

func BenchmarkMarshalSendBatchRequest(b *testing.B) {
	body := struct {
		Messages []*SendRequest `json:"messages"`
	}{Messages: benchRequests()}
	for b.Loop() {
		if _, err := json.Marshal(body); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRequests() []*SendRequest {
	msgs := make([]*SendRequest, 100)
	for i := range msgs {
		p := strings.Repeat("x", 256)
		d := Duration(time.Hour)
		id := "01JDBENCH0000000000000000" + string(rune('a'+i%26))
		msgs[i] = &SendRequest{ID: &id, Payload: &p, Delay: &d}
	}
	return msgs
}

// TestDecodeSendBatchResponseMatchesJSON checks the hand-written answer
// decoder against encoding/json: on the server's own answers it must
// decode, to equal values; on mutated bytes, whenever it decodes, json
// must decode the same bytes to the same value.
func TestDecodeSendBatchResponseMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	decoded := 0
	for range 3000 {
		res := randResponse(r)
		b, err := json.Marshal(&res)
		if err != nil {
			t.Fatal(err)
		}
		if checkDecodeResponse(t, b) {
			decoded++
		}
		for range 10 {
			m := append([]byte(nil), b...)
			for range 1 + r.IntN(2) {
				if len(m) == 0 {
					break
				}
				i := r.IntN(len(m))
				switch r.IntN(3) {
				case 0:
					const alphabet = "{}[]\":,\\ -0.eE+1tfnul\x00\xff"
					m[i] = alphabet[r.IntN(len(alphabet))]
				case 1:
					m = append(m[:i], m[i+1:]...)
				default:
					m = append(m[:i+1], m[i:]...)
				}
			}
			checkDecodeResponse(t, m)
		}
	}
	if decoded < 1000 {
		t.Fatalf("the fast decoder took only %d of 3000 answers", decoded)
	}
}

func checkDecodeResponse(t *testing.T, b []byte) bool {
	t.Helper()
	var fast, ref SendBatchResponse
	ok := DecodeSendBatchResponse(b, &fast)
	err := json.NewDecoder(strings.NewReader(string(b))).Decode(&ref)
	if ok && err != nil {
		t.Fatalf("%s: fast decodes, json says %v", b, err)
	}
	if ok && !reflect.DeepEqual(fast, ref) {
		fj, _ := json.Marshal(fast)
		rj, _ := json.Marshal(ref)
		t.Fatalf("%s:\nfast %s\njson %s", b, fj, rj)
	}
	return ok
}

func randResponse(r *rand.Rand) SendBatchResponse {
	n := r.IntN(4)
	res := SendBatchResponse{Results: make([]BatchResult, n)}
	for i := range res.Results {
		if r.IntN(5) == 0 {
			res.Results[i].Error = &ErrorBody{Code: CodeConflict, Message: []string{"boom", "x \"q\""}[r.IntN(2)], Field: []string{"", "id"}[r.IntN(2)]}
			continue
		}
		// Times as the server writes them: UTC, millisecond precision.
		ms := func() time.Time { return randTime(r).UTC().Truncate(time.Millisecond) }
		m := &Message{ID: []string{"01JD", "a<b", "é"}[r.IntN(3)], Topic: "t", DeliverAt: ms(),
			State: "scheduled", Attempt: r.IntN(3), Failures: r.IntN(2), MaxAttempts: r.IntN(10) - 2,
			LastError: []string{"", "boom"}[r.IntN(2)], CreatedAt: ms(), UpdatedAt: ms(),
			Receipt: []string{"", "rcpt"}[r.IntN(2)], Duplicate: r.IntN(2) == 0}
		if r.IntN(4) == 0 {
			m.Headers = map[string]string{"b": "2", "a": "1"}
		}
		switch r.IntN(3) {
		case 0:
			p := "hello"
			m.Payload = &p
		case 1:
			p := "eA=="
			m.PayloadBase64 = &p
		}
		if r.IntN(3) == 0 {
			le := ms()
			m.LeaseExpiresAt = &le
		}
		res.Results[i].Message = m
	}
	return res
}

func BenchmarkDecodeSendBatchResponse(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	res := SendBatchResponse{}
	for len(res.Results) < 100 {
		x := randResponse(r)
		for _, it := range x.Results {
			if it.Message != nil && len(res.Results) < 100 {
				it.Message.ID = "01JDQ7ZKXW6V3B0M2N4P8R5T9A" // escapes (a<b) take the json path
				res.Results = append(res.Results, it)
			}
		}
	}
	body, _ := json.Marshal(&res)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			var out SendBatchResponse
			if !DecodeSendBatchResponse(body, &out) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			var out SendBatchResponse
			if err := json.Unmarshal(body, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzDecodeSendBatchResponse: on any bytes, the hand-written answer
// decoder either gives up or agrees with encoding/json.
func FuzzDecodeSendBatchResponse(f *testing.F) {
	r := rand.New(rand.NewPCG(17, 18))
	for range 20 {
		res := randResponse(r)
		b, _ := json.Marshal(&res)
		f.Add(b)
	}
	for _, s := range []string{`{"results":[]}`, `{"results":null}`, `{"results":[{}]} x`, `{"results":[{"message":{"id":"a","attempt":01}}]}`,
		`{"results":[{"message":{"id":"a","ID":"b"}}]}`, `{"results":[{"message":{"attempt":-0}}]}`, `{"results":[{"message":{"attempt":1.0}}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecodeResponse(t, b) })
}

// TestAppendLeaseResponseMatchesJSON compares the lease answer's encoder
// with encoding/json on FromMessages, byte for byte, on random domain
// messages: text and binary payloads, headers, zero and zoned times with
// sub-millisecond digits. It refuses (ok false) exactly the messages it
// leaves to encoding/json: the payload_json marker, years past 9999.
func TestAppendLeaseResponseMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	optTime := func() time.Time {
		if r.IntN(4) == 0 {
			return time.Time{}
		}
		return randTime(r).Add(time.Duration(r.IntN(1e6)))
	}
	for range 3000 {
		ms := make([]*domain.Message, r.IntN(4))
		refuse := false
		for i := range ms {
			m := &domain.Message{ID: randText(r), Topic: randText(r), DeliverAt: optTime(),
				State:   domain.State([]string{"ready", "inflight", "scheduled"}[r.IntN(3)]),
				Attempt: r.IntN(3), Failures: r.IntN(2), MaxAttempts: r.IntN(10) - 2, Priority: r.IntN(3),
				LastError: []string{"", "boom\n<x>"}[r.IntN(2)], CreatedAt: optTime(), UpdatedAt: optTime(),
				Receipt: []string{"", "tok-1"}[r.IntN(2)], LeaseExpiresAt: optTime(), Duplicate: r.IntN(4) == 0}
			switch r.IntN(4) {
			case 0:
				m.Payload = []byte(randText(r))
			case 1:
				m.Payload = make([]byte, r.IntN(40))
				for j := range m.Payload {
					m.Payload[j] = byte(r.Uint32())
				}
			case 2:
				m.Payload = []byte{}
			}
			switch r.IntN(4) {
			case 0:
				m.Headers = map[string]string{"b": randText(r), "a": "1", randText(r): randText(r)}
			case 1:
				m.Headers = map[string]string{}
			case 2:
				if r.IntN(5) == 0 {
					m.Headers = map[string]string{HeaderPayloadFormat: []string{PayloadFormatJSON, "text"}[r.IntN(2)], "k": "v"}
					m.Payload = []byte(`{"a":"<b>"}`)
					refuse = true
				}
			}
			if r.IntN(50) == 0 {
				m.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
				refuse = true
			}
			ms[i] = m
		}
		var acks []AckResult
		for j := range r.IntN(4) {
			a := AckResult{ID: randText(r), OK: true}
			if r.IntN(8) == 0 {
				a = AckResult{ID: "x" + strconv.Itoa(j), Error: &ErrorBody{Code: CodeConflict, Message: randText(r), Field: []string{"", "receipt"}[r.IntN(2)]}}
			}
			acks = append(acks, a)
		}
		got, ok := AppendLeaseResponse(nil, ms, acks)
		want, err := json.Marshal(MessagesResponse{Messages: FromMessages(ms), Acks: acks})
		if refuse {
			if ok {
				t.Fatalf("encoded what it must leave to encoding/json: %s", got)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !ok || string(got) != string(want) {
			t.Fatalf("ok %v\ngot  %s\nwant %s", ok, got, want)
		}
	}
}

// TestAppendAckResultsMatchJSON: a batch ack's answer and a single ack's,
// failures (with every error field) among them, byte for byte as
// encoding/json writes them.
func TestAppendAckResultsMatchJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	checked := 0
	for range 3000 {
		res := AckBatchResponse{Results: make([]AckResult, r.IntN(5))}
		for i := range res.Results {
			a := &res.Results[i]
			a.ID, a.OK = randText(r), r.IntN(3) != 0
			if !a.OK && r.IntN(4) != 0 {
				a.Error = &ErrorBody{Code: []string{CodeConflict, CodeNotFound}[r.IntN(2)], Message: randText(r),
					Field: []string{"", "receipt"}[r.IntN(2)], RequestID: []string{"", randText(r)}[r.IntN(2)]}
			}
		}
		if r.IntN(20) == 0 {
			res.Results = nil
		}
		want, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendAckBatchResponse(nil, &res); string(got) != string(want) {
			t.Fatalf("batch\ngot  %s\nwant %s", got, want)
		}
		for i := range res.Results {
			want, err := json.Marshal(res.Results[i])
			if err != nil {
				t.Fatal(err)
			}
			if got := AppendAckResult(nil, &res.Results[i]); string(got) != string(want) {
				t.Fatalf("one\ngot  %s\nwant %s", got, want)
			}
			checked++
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d results checked", checked)
	}
}
