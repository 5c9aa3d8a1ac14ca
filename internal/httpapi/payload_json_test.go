package httpapi

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/wire"
)

// TestPayloadJSON: a JSON value sent as payload_json is stored as its
// compact text and answered as payload_json again (get, lease, duplicate,
// batch); string payloads are answered as before; mixing forms is a 400.
func TestPayloadJSON(t *testing.T) {
	b := setup(t, nil)
	r := b.do(t, "POST", "/v1/topics/j/messages", `{"id":"a","payload_json":{ "order" : 42, "items":["x"] },"headers":{"k":"v"}}`)
	want(t, r, 201)
	if s := string(r.raw); strings.Contains(s, "delayq-payload-format") || !strings.Contains(s, `"headers":{"k":"v"}`) {
		t.Fatalf("send answer: %s", s)
	}
	want(t, b.do(t, "POST", "/v1/topics/j/messages", `{"id":"s","payload":"{\"order\":42}"}`), 201)
	want(t, b.do(t, "POST", "/v1/topics/j/messages:batch", `{"messages":[{"id":"n","payload_json":7},{"id":"t","payload_json":"text"}]}`), 200)

	r = b.do(t, "GET", "/v1/topics/j/messages/a", "")
	want(t, r, 200)
	if s := string(r.raw); !strings.Contains(s, `"payload_json":{"order":42,"items":["x"]}`) || strings.Contains(s, `"payload":`) || strings.Contains(s, "delayq-payload-format") || !strings.Contains(s, `"headers":{"k":"v"}`) {
		t.Fatalf("get: %s", s)
	}
	if s := string(b.do(t, "GET", "/v1/topics/j/messages/s", "").raw); !strings.Contains(s, `"payload":"{\"order\":42}"`) || strings.Contains(s, "payload_json") {
		t.Fatalf("a string payload is answered as before: %s", s)
	}
	r = b.do(t, "POST", "/v1/topics/j/messages", `{"id":"a","payload":"other"}`)
	want(t, r, 200)
	if s := string(r.raw); !strings.Contains(s, `"duplicate":true`) || !strings.Contains(s, `"payload_json":{"order":42,"items":["x"]}`) {
		t.Fatalf("duplicate: %s", s)
	}
	r = b.do(t, "POST", "/v1/topics/j/lease", `{"max":10}`)
	want(t, r, 200)
	got := map[string]string{}
	for _, m := range into[wire.MessagesResponse](t, r).Messages {
		switch {
		case m.PayloadJSON != nil:
			got[m.ID] = "json " + string(m.PayloadJSON)
		case m.Payload != nil:
			got[m.ID] = "text " + *m.Payload
		}
	}
	for id, w := range map[string]string{"a": `json {"order":42,"items":["x"]}`, "s": `text {"order":42}`, "n": "json 7", "t": `json "text"`} {
		if got[id] != w {
			t.Errorf("lease: %s = %q, want %q", id, got[id], w)
		}
	}
	// The engine holds the compact text: consumers read the same bytes either way.
	if m, err := b.eng.Get(t.Context(), "j", "a"); err != nil || string(m.Payload) != `{"order":42,"items":["x"]}` || m.Headers[wire.HeaderPayloadFormat] != "json" {
		t.Fatalf("stored: %q %v %v", m.Payload, m.Headers, err)
	}
	r = b.do(t, "POST", "/v1/topics/j/messages", `{"payload":"x","payload_json":{}}`)
	want(t, r, 400)
	if r.err.Field != "payload_json" {
		t.Fatalf("both forms: %+v", r.err)
	}
}

// TestBatchNamesFirstBadItem: the first item failing validation is named by
// its index and the whole batch is refused (nothing stored).
func TestBatchNamesFirstBadItem(t *testing.T) {
	b := setup(t, nil)
	r := b.do(t, "POST", "/v1/topics/bb/messages:batch", `{"messages":[{"id":"ok","payload":"1"},{"id":"x","payload":"2","delay":"soon"},{"payload":"3","headers":{"":"v"}}]}`)
	want(t, r, 400)
	if r.err.Field != "messages[1].delay" {
		t.Fatalf("error %+v: want messages[1].delay", r.err)
	}
	want(t, b.do(t, "GET", "/v1/topics/bb/messages/ok", ""), 404)
}
