package httpapi

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/wire"
)

// TestBadInput is the S20 corpus: every case is a 4xx with the right code
// and field, never a 500, and the queue is unchanged afterwards.
func TestBadInput(t *testing.T) {
	b := setupEngine(t, engine.Config{MaxPayload: 1024}, func(c *Config) { c.MaxBodyBytes = 4096 })
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"m1","payload":"x","delay":"1h"}`), 201)
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"m2","payload":"y"}`), 201)
	r := b.do(t, "POST", "/v1/topics/t/lease", `{}`)
	want(t, r, 200)
	receipt := into[wire.MessagesResponse](t, r).Messages[0].Receipt

	before := b.snapshot(t, [2]string{"t", "m1"}, [2]string{"t", "m2"})
	const send = "/v1/topics/t/messages"
	deep := `{"max":` + strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000) + `}`
	big := strings.Repeat("a", 5000)
	cases := []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		// Strict JSON.
		{"unknown field", "POST", send, `{"payload":"x","dealy":"30m"}`, 400, wire.CodeInvalid, "dealy"},
		{"case-variant field", "POST", send, `{"payload":"x","Delay":"30m"}`, 400, wire.CodeInvalid, "Delay"},
		{"bare number delay", "POST", send, `{"payload":"x","delay":30}`, 400, wire.CodeInvalid, "delay"},
		{"delay not a duration", "POST", send, `{"payload":"x","delay":"soon"}`, 400, wire.CodeInvalid, "delay"},
		{"delay and deliver_at", "POST", send, `{"payload":"x","delay":"1s","deliver_at":"2030-01-01T00:00:00Z"}`, 400, wire.CodeInvalid, "delay"},
		{"delay and delay_ms", "POST", send, `{"payload":"x","delay":"1s","delay_ms":5}`, 400, wire.CodeInvalid, "delay"},
		{"both payloads", "POST", send, `{"payload":"x","payload_base64":"eA=="}`, 400, wire.CodeInvalid, "payload"},
		{"no payload", "POST", send, `{"delay":"1s"}`, 400, wire.CodeInvalid, "payload"},
		{"bad base64", "POST", send, `{"payload_base64":"!!!"}`, 400, wire.CodeInvalid, "payload_base64"},
		{"unpadded base64", "POST", send, `{"payload_base64":"eA"}`, 400, wire.CodeInvalid, "payload_base64"},
		{"negative delay", "POST", send, `{"payload":"x","delay":"-1s"}`, 400, wire.CodeInvalid, "delay"},
		{"huge delay", "POST", send, `{"payload":"x","delay":"100000h"}`, 400, wire.CodeInvalid, "delay"},
		{"overflowing delay", "POST", send, `{"payload":"x","delay":"9999999999h"}`, 400, wire.CodeInvalid, "delay"},
		{"negative delay_ms", "POST", send, `{"payload":"x","delay_ms":-1}`, 400, wire.CodeInvalid, "delay_ms"},
		{"max int64 delay_ms", "POST", send, `{"payload":"x","delay_ms":9223372036854775807}`, 400, wire.CodeInvalid, "delay_ms"},
		{"1e309 delay_ms", "POST", send, `{"payload":"x","delay_ms":1e309}`, 400, wire.CodeInvalid, "delay_ms"},
		{"fractional delay_ms", "POST", send, `{"payload":"x","delay_ms":1.5}`, 400, wire.CodeInvalid, "delay_ms"},
		{"-0 delay_ms", "POST", send, `{"payload":"x","delay_ms":-0}`, 400, wire.CodeInvalid, "delay_ms"},
		{"string delay_ms", "POST", send, `{"payload":"x","delay_ms":"10s"}`, 400, wire.CodeInvalid, "delay_ms"},
		{"NaN", "POST", send, `{"payload":"x","delay_ms":NaN}`, 400, wire.CodeInvalid, ""},
		{"deliver_at not RFC 3339", "POST", send, `{"payload":"x","deliver_at":"tomorrow"}`, 400, wire.CodeInvalid, "deliver_at"},
		{"deliver_at beyond max", "POST", send, `{"payload":"x","deliver_at":"9999-01-01T00:00:00Z"}`, 400, wire.CodeInvalid, "deliver_at"},
		{"max_attempts 0", "POST", send, `{"payload":"x","max_attempts":0}`, 400, wire.CodeInvalid, "max_attempts"},
		{"max_attempts huge", "POST", send, `{"payload":"x","max_attempts":1000000}`, 400, wire.CodeInvalid, "max_attempts"},
		{"headers not strings", "POST", send, `{"payload":"x","headers":{"a":1}}`, 400, wire.CodeInvalid, "headers"},
		{"header key with newline", "POST", send, `{"payload":"x","headers":{"a\nb":"v"}}`, 400, wire.CodeInvalid, "headers"},
		{"header key with C1 control", "POST", send, `{"payload":"x","headers":{"a\u0085b":"v"}}`, 400, wire.CodeInvalid, "headers"},
		{"header key with line separator", "POST", send, `{"payload":"x","headers":{"a\u2028b":"v"}}`, 400, wire.CodeInvalid, "headers"},
		{"batch item header key with DEL", "POST", send + ":batch", `{"messages":[{"payload":"x","headers":{"a\u007fb":"v"}}]}`, 400, wire.CodeInvalid, "messages[0].headers"},
		{"rate limit too small", "PUT", "/v1/topics/t", `{"rate_limit":{"per_second":1e-12}}`, 400, wire.CodeInvalid, "rate_limit.per_second"},
		{"rate limit too large", "PUT", "/v1/topics/t", `{"rate_limit":{"per_second":1e300}}`, 400, wire.CodeInvalid, "rate_limit.per_second"},
		{"rate limit burst too large", "PUT", "/v1/topics/t", `{"rate_limit":{"per_second":5,"burst":2000000000}}`, 400, wire.CodeInvalid, "rate_limit.burst"},
		{"dead cursor not ours", "GET", "/v1/topics/t/dead?cursor=zz", "", 400, wire.CodeInvalid, "cursor"},
		{"empty header key", "POST", send, `{"payload":"x","headers":{"":"v"}}`, 400, wire.CodeInvalid, "headers"},
		{"too many headers", "POST", send, `{"payload":"x","headers":{` + manyHeaders(65) + `}}`, 400, wire.CodeInvalid, "headers"},
		{"invalid JSON", "POST", send, `{"payload":}`, 400, wire.CodeInvalid, ""},
		{"truncated JSON", "POST", send, `{"payload":"x"`, 400, wire.CodeInvalid, ""},
		{"trailing garbage", "POST", send, `{"payload":"x"} garbage`, 400, wire.CodeInvalid, ""},
		{"two objects", "POST", send, `{"payload":"x"}{"payload":"y"}`, 400, wire.CodeInvalid, ""},
		{"not an object", "POST", send, `["payload"]`, 400, wire.CodeInvalid, ""},
		{"empty body", "POST", send, ``, 400, wire.CodeInvalid, ""},
		{"null body", "POST", send, `null`, 400, wire.CodeInvalid, ""},
		{"duplicate keys", "POST", send, `{"payload":"x","delay":"1h","delay":"0s"}`, 400, wire.CodeInvalid, "delay"},
		{"10k-deep nesting", "POST", "/v1/topics/t/lease", deep, 400, wire.CodeInvalid, "max" + strings.Repeat("[0]", 31)},
		{"invalid UTF-8", "POST", send, "{\"payload\":\"\xff\xfe\"}", 400, wire.CodeInvalid, ""},
		{"lone surrogate", "POST", send, `{"payload":"\ud800"}`, 400, wire.CodeInvalid, ""},
		{"lone low surrogate", "POST", send, `{"payload":"a\udc00"}`, 400, wire.CodeInvalid, ""},
		{"NUL byte raw", "POST", send, "{\"payload\":\"a\x00\"}", 400, wire.CodeInvalid, ""},
		{"NUL in id", "POST", send, `{"id":"a\u0000b","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"CRLF in id", "POST", send, `{"id":"a\r\nb","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"hash tag id", "POST", send, `{"id":"{x}","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"reverse hash tag id", "POST", send, `{"id":"}{","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"sql id", "POST", send, `{"id":"'; DROP TABLE q;--","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"lua id", "POST", send, `{"id":"]]..redis.call('FLUSHALL')--","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"10 KB id", "POST", send, `{"id":"` + strings.Repeat("i", 10240) + `","payload":"x"}`, 413, wire.CodeTooLarge, ""},
		{"long id", "POST", send, `{"id":"` + strings.Repeat("i", 201) + `","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"confusable id", "POST", send, `{"id":"аbc","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"payload over max", "POST", send, `{"payload":"` + strings.Repeat("p", 1025) + `"}`, 413, wire.CodeTooLarge, ""},
		{"body over limit", "POST", send, `{"payload":"` + big + `"}`, 413, wire.CodeTooLarge, ""},
		{"unknown query", "POST", send + "?delay=1s", `{"payload":"x"}`, 400, wire.CodeInvalid, "delay"},
		{"token in query", "POST", send + "?access_token=abc", `{"payload":"x"}`, 400, wire.CodeInvalid, "access_token"},

		// Path values.
		{"topic with ../", "POST", "/v1/topics/..%2Fetc/messages", `{"payload":"x"}`, 400, wire.CodeInvalid, "topic"},
		{"topic with braces", "POST", "/v1/topics/%7Bt%7D/messages", `{"payload":"x"}`, 400, wire.CodeInvalid, "topic"},
		{"topic with space", "POST", "/v1/topics/a%20b/messages", `{"payload":"x"}`, 400, wire.CodeInvalid, "topic"},
		{"topic with star", "POST", "/v1/topics/a*/messages", `{"payload":"x"}`, 400, wire.CodeInvalid, "topic"},
		{"10 KB topic", "POST", "/v1/topics/" + strings.Repeat("t", 10240) + "/messages", `{"payload":"x"}`, 400, wire.CodeInvalid, "topic"},
		{"id with NUL", "GET", "/v1/topics/t/messages/a%00b", "", 400, wire.CodeInvalid, "id"},
		{"id with braces", "DELETE", "/v1/topics/t/messages/%7Bx%7D", "", 400, wire.CodeInvalid, "id"},
		{"dot-dot path", "GET", "/v1/topics/t/../../healthz/x", "", 404, wire.CodeNotFound, ""},

		// Batch.
		{"batch empty", "POST", send + ":batch", `{"messages":[]}`, 400, wire.CodeInvalid, "messages"},
		{"batch over 1000", "POST", send + ":batch", `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"payload":""},`, 1001), ",") + `]}`, 400, wire.CodeInvalid, "messages"},
		{"batch item typo", "POST", send + ":batch", `{"messages":[{"payload":"x"},{"payload":"y","dealy":"1s"}]}`, 400, wire.CodeInvalid, "messages[1].dealy"},
		{"batch item bare delay", "POST", send + ":batch", `{"messages":[{"payload":"x","delay":5}]}`, 400, wire.CodeInvalid, "messages[0].delay"},
		{"explicit empty id", "POST", send, `{"id":"","payload":"x"}`, 400, wire.CodeInvalid, "id"},
		{"batch item empty id", "POST", send + ":batch", `{"messages":[{"payload":"x"},{"id":"","payload":"y"}]}`, 400, wire.CodeInvalid, "messages[1].id"},
		{"batch item bad id", "POST", send + ":batch", `{"messages":[{"payload":"x"},{"id":"{x}","payload":"y"}]}`, 400, wire.CodeInvalid, "messages[1].id"},
		{"batch item not object", "POST", send + ":batch", `{"messages":[5]}`, 400, wire.CodeInvalid, "messages[0]"},
		{"batch dup key in item", "POST", send + ":batch", `{"messages":[{"payload":"x","payload":"y"}]}`, 400, wire.CodeInvalid, "messages[0].payload"},

		// Lease.
		{"lease max 0", "POST", "/v1/topics/t/lease", `{"max":0}`, 400, wire.CodeInvalid, "max"},
		{"lease max 1001", "POST", "/v1/topics/t/lease", `{"max":1001}`, 400, wire.CodeInvalid, "max"},
		{"lease wait 31s", "POST", "/v1/topics/t/lease", `{"wait":"31s"}`, 400, wire.CodeInvalid, "wait"},
		{"lease wait negative", "POST", "/v1/topics/t/lease", `{"wait":"-1s"}`, 400, wire.CodeInvalid, "wait"},
		{"lease bare number wait", "POST", "/v1/topics/t/lease", `{"wait":30}`, 400, wire.CodeInvalid, "wait"},
		{"lease zero lease", "POST", "/v1/topics/t/lease", `{"lease":"0s"}`, 400, wire.CodeInvalid, "lease"},
		{"lease too long", "POST", "/v1/topics/t/lease", `{"lease":"100h"}`, 400, wire.CodeInvalid, "lease"},
		{"lease typo", "POST", "/v1/topics/t/lease", `{"mx":5}`, 400, wire.CodeInvalid, "mx"},

		// Ack, nack, extend, reschedule.
		{"ack no receipt", "POST", "/v1/topics/t/messages/m2/ack", `{}`, 400, wire.CodeInvalid, "receipt"},
		{"ack stale receipt", "POST", "/v1/topics/t/messages/m2/ack", `{"receipt":"nope"}`, 409, wire.CodeConflict, ""},
		{"ack unknown id", "POST", "/v1/topics/t/messages/zz/ack", `{"receipt":"` + receipt + `"}`, 404, wire.CodeNotFound, ""},
		{"acks empty", "POST", "/v1/topics/t/acks", `{"acks":[]}`, 400, wire.CodeInvalid, "acks"},
		{"acks bad id", "POST", "/v1/topics/t/acks", `{"acks":[{"id":"{x}","receipt":"r"}]}`, 400, wire.CodeInvalid, "acks[0].id"},
		{"acks typo", "POST", "/v1/topics/t/acks", `{"acks":[{"id":"m2","reciept":"r"}]}`, 400, wire.CodeInvalid, "acks[0].reciept"},
		{"nack negative delay", "POST", "/v1/topics/t/messages/m2/nack", `{"receipt":"` + receipt + `","delay":"-5s"}`, 400, wire.CodeInvalid, "delay"},
		{"nack huge reason", "POST", "/v1/topics/t/messages/m2/nack", `{"receipt":"` + receipt + `","reason":"` + strings.Repeat("r", 5000) + `"}`, 400, wire.CodeInvalid, "reason"},
		{"extend no lease", "POST", "/v1/topics/t/messages/m2/extend", `{"receipt":"` + receipt + `"}`, 400, wire.CodeInvalid, "lease"},
		{"extend stale", "POST", "/v1/topics/t/messages/m2/extend", `{"receipt":"old","lease":"1m"}`, 409, wire.CodeConflict, ""},
		{"reschedule nothing", "PATCH", "/v1/topics/t/messages/m1", `{}`, 400, wire.CodeInvalid, "delay"},
		{"reschedule both", "PATCH", "/v1/topics/t/messages/m1", `{"delay":"1s","deliver_at":"2030-01-01T00:00:00Z"}`, 400, wire.CodeInvalid, "delay"},
		{"reschedule payload", "PATCH", "/v1/topics/t/messages/m1", `{"delay":"1s","payload":"x"}`, 400, wire.CodeInvalid, "payload"},
		{"reschedule inflight", "PATCH", "/v1/topics/t/messages/m2", `{"delay":"1s"}`, 409, wire.CodeConflict, ""},

		// Topic settings and dead letters.
		{"settings typo", "PUT", "/v1/topics/t", `{"max_atempts":3}`, 400, wire.CodeInvalid, "max_atempts"},
		{"settings nested typo", "PUT", "/v1/topics/t", `{"backoff":{"initail":"1s"}}`, 400, wire.CodeInvalid, "backoff.initail"},
		{"settings bad jitter", "PUT", "/v1/topics/t", `{"backoff":{"jitter":2}}`, 400, wire.CodeInvalid, "backoff.jitter"},
		{"settings bare lease", "PUT", "/v1/topics/t", `{"lease":30}`, 400, wire.CodeInvalid, "lease"},
		{"dead limit 0", "GET", "/v1/topics/t/dead?limit=0", "", 400, wire.CodeInvalid, "limit"},
		{"dead limit word", "GET", "/v1/topics/t/dead?limit=ten", "", 400, wire.CodeInvalid, "limit"},
		{"dead limit twice", "GET", "/v1/topics/t/dead?limit=1&limit=2", "", 400, wire.CodeInvalid, "limit"},
		{"dead bad query", "GET", "/v1/topics/t/dead?%zz", "", 400, wire.CodeInvalid, ""},
		{"replay with body", "POST", "/v1/topics/t/dead/replay", `{"all":true}`, 400, wire.CodeInvalid, "all"},
		{"replay unknown", "POST", "/v1/topics/t/dead/m1/replay", ``, 404, wire.CodeNotFound, ""},

		// Routing.
		{"wrong method", "PUT", send, `{}`, 405, wire.CodeMethod, ""},
		{"unknown path", "POST", "/v1/topics/t/messages/m1/explode", `{}`, 404, wire.CodeNotFound, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do(t, tc.method, tc.path, tc.body)
			if r.status != tc.status || r.err.Code != tc.code || r.err.Field != tc.field {
				t.Fatalf("got %d %s field %q, want %d %s field %q; body %.300s", r.status, r.err.Code, r.err.Field, tc.status, tc.code, tc.field, r.raw)
			}
		})
	}
	if after := b.snapshot(t, [2]string{"t", "m1"}, [2]string{"t", "m2"}); !before.equal(after) {
		t.Fatalf("the corpus changed the queue:\nbefore %+v\nafter  %+v", before, after)
	}
}

func manyHeaders(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"h%d":"v"`, i)
	}
	return strings.Join(parts, ",")
}

// TestOversizeChunked sends a chunked body (no Content-Length) larger than
// the limit over a raw connection: the answer is 413 after the server has
// read the limit, not the whole body (most of it is never sent).
func TestOversizeChunked(t *testing.T) {
	b := setupEngine(t, engine.Config{MaxPayload: 1024}, func(c *Config) { c.MaxBodyBytes = 4096 })
	conn, err := net.Dial("tcp", b.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	chunk := `{"payload":"` + strings.Repeat("a", 8192)
	fmt.Fprintf(conn, "POST /v1/topics/t/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n%x\r\n%s\r\n", len(chunk), chunk)
	// The stream never ends: a server that buffered it all would hang here.
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 413 {
		t.Fatalf("status %d, want 413", res.StatusCode)
	}
	// Content-Length over the limit is refused before reading anything.
	conn2, err := net.Dial("tcp", b.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	fmt.Fprintf(conn2, "POST /v1/topics/t/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\nContent-Type: application/json\r\n\r\n{")
	res, err = http.ReadResponse(bufio.NewReader(conn2), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 413 {
		t.Fatalf("status %d, want 413", res.StatusCode)
	}
	if n := b.spy.Mutations(); n != 0 {
		t.Fatalf("%d queue calls for oversize bodies", n)
	}
}
