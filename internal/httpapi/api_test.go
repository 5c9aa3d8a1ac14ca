package httpapi

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// TestEndpoints walks every endpoint of the SPEC table through its happy
// path on a real engine, checking status codes and answer shapes.
func TestEndpoints(t *testing.T) {
	b := setup(t, nil)

	// Topic settings: PUT then GET.
	r := b.do(t, "PUT", "/v1/topics/orders", `{"max_attempts":1,"lease":"10s","backoff":{"initial":"1s","max":"1m","multiplier":2,"jitter":0.1}}`)
	want(t, r, 200)
	if set := into[wire.TopicSettings](t, r); set.MaxAttempts != 1 || set.Lease == nil || *set.Lease != wire.Duration(10e9) {
		t.Fatalf("settings answer %s", r.raw)
	}

	// Send: 201, then the same id again: 200 duplicate.
	r = b.do(t, "POST", "/v1/topics/orders/messages", `{"id":"o-1","payload":"close order 1","headers":{"k":"v"},"delay":"1h"}`)
	want(t, r, 201)
	m := into[wire.Message](t, r)
	// A send answer leaves the payload out (the producer just sent it)…
	if m.ID != "o-1" || m.State != "scheduled" || m.Payload != nil || m.PayloadBase64 != nil || m.Headers["k"] != "v" || m.DeliverAt.Location().String() != "UTC" {
		t.Fatalf("send answer %s", r.raw)
	}
	// …but a duplicate's answer carries the stored one, which may differ.
	r = b.do(t, "POST", "/v1/topics/orders/messages", `{"id":"o-1","payload":"other","delay_ms":5}`)
	want(t, r, 200)
	if m := into[wire.Message](t, r); !m.Duplicate || *m.Payload != "close order 1" {
		t.Fatalf("duplicate answer %s", r.raw)
	}

	// Binary payload goes in and comes back as base64.
	bin := base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0xfe})
	want(t, b.do(t, "POST", "/v1/topics/orders/messages", `{"id":"bin","payload_base64":"`+bin+`","deliver_at":"2999-01-01T00:00:00Z"}`), 400) // beyond max delay
	want(t, b.do(t, "POST", "/v1/topics/orders/messages", `{"id":"bin","payload_base64":"`+bin+`","deliver_at":"2030-01-01T00:00:00.123Z"}`), 201)
	r = b.do(t, "GET", "/v1/topics/orders/messages/bin", "")
	want(t, r, 200)
	if m := into[wire.Message](t, r); m.PayloadBase64 == nil || *m.PayloadBase64 != bin || m.Payload != nil || m.DeliverAt.Format("2006-01-02T15:04:05.000Z07:00") != "2030-01-01T00:00:00.123Z" {
		t.Fatalf("get answer %s", r.raw)
	}
	want(t, b.do(t, "GET", "/v1/topics/orders/messages/nope", ""), 404)

	// Reschedule o-1 to now: ready.
	r = b.do(t, "PATCH", "/v1/topics/orders/messages/o-1", `{"delay":"0s"}`)
	want(t, r, 200)
	if m := into[wire.Message](t, r); m.State != "ready" {
		t.Fatalf("reschedule answer %s", r.raw)
	}

	// Batch (the literal colon route), due now.
	r = b.do(t, "POST", "/v1/topics/orders/messages:batch", `{"messages":[{"id":"b1","payload":"1"},{"id":"b2","payload":"2"},{"id":"o-1","payload":"dup"}]}`)
	want(t, r, 200)
	br := into[wire.SendBatchResponse](t, r)
	if len(br.Results) != 3 || br.Results[0].Message.ID != "b1" || !br.Results[2].Message.Duplicate {
		t.Fatalf("batch answer %s", r.raw)
	}

	// Lease everything due: o-1, b1, b2 in (due, send) order.
	r = b.do(t, "POST", "/v1/topics/orders/lease", `{"max":10,"lease":"30s"}`)
	want(t, r, 200)
	leased := into[wire.MessagesResponse](t, r).Messages
	if len(leased) != 3 || leased[0].Receipt == "" || leased[0].LeaseExpiresAt == nil || leased[0].State != "inflight" {
		t.Fatalf("lease answer %s", r.raw)
	}
	byID := map[string]*wire.Message{}
	for _, m := range leased {
		byID[m.ID] = m
	}

	// Extend, ack, batch ack, and a stale receipt.
	r = b.do(t, "POST", "/v1/topics/orders/messages/b1/extend", `{"receipt":"`+byID["b1"].Receipt+`","lease":"1m"}`)
	want(t, r, 200)
	if m := into[wire.Message](t, r); !m.LeaseExpiresAt.After(*byID["b1"].LeaseExpiresAt) {
		t.Fatalf("extend did not move the lease: %s", r.raw)
	}
	r = b.do(t, "POST", "/v1/topics/orders/messages/b1/ack", `{"receipt":"`+byID["b1"].Receipt+`"}`)
	want(t, r, 200)
	if ar := into[wire.AckResult](t, r); !ar.OK || ar.ID != "b1" {
		t.Fatalf("ack answer %s", r.raw)
	}
	// The same ack again (a retry after a lost answer) is answered as the
	// first; another receipt is a conflict.
	want(t, b.do(t, "POST", "/v1/topics/orders/messages/b1/ack", `{"receipt":"`+byID["b1"].Receipt+`"}`), 200)
	want(t, b.do(t, "POST", "/v1/topics/orders/messages/b1/ack", `{"receipt":"`+byID["b1"].Receipt+`x"}`), 409)
	r = b.do(t, "POST", "/v1/topics/orders/acks", `{"acks":[{"id":"b2","receipt":"`+byID["b2"].Receipt+`"},{"id":"b1","receipt":"stale"}]}`)
	want(t, r, 200)
	if ab := into[wire.AckBatchResponse](t, r); !ab.Results[0].OK || ab.Results[1].OK || ab.Results[1].Error.Code != wire.CodeConflict {
		t.Fatalf("acks answer %s", r.raw)
	}

	// Nack o-1 with max_attempts 1: dead. Dead list, replay, delete, purge.
	r = b.do(t, "POST", "/v1/topics/orders/messages/o-1/nack", `{"receipt":"`+byID["o-1"].Receipt+`","reason":"boom"}`)
	want(t, r, 200)
	if m := into[wire.Message](t, r); m.State != "dead" || m.LastError != "boom" {
		t.Fatalf("nack answer %s", r.raw)
	}
	r = b.do(t, "GET", "/v1/topics/orders/dead?limit=10", "")
	want(t, r, 200)
	if dp := into[wire.DeadPage](t, r); len(dp.Messages) != 1 || dp.Messages[0].ID != "o-1" {
		t.Fatalf("dead answer %s", r.raw)
	}
	r = b.do(t, "POST", "/v1/topics/orders/dead/o-1/replay", "")
	want(t, r, 200)
	if m := into[wire.Message](t, r); m.State != "ready" {
		t.Fatalf("replay answer %s", r.raw)
	}
	kill := func(id string) {
		t.Helper()
		r := b.do(t, "POST", "/v1/topics/orders/lease", `{}`)
		want(t, r, 200)
		ms := into[wire.MessagesResponse](t, r).Messages
		if len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("lease for %s: %s", id, r.raw)
		}
		want(t, b.do(t, "POST", "/v1/topics/orders/messages/"+id+"/nack", `{"receipt":"`+ms[0].Receipt+`","delay":"0s"}`), 200)
	}
	kill("o-1")
	r = b.do(t, "POST", "/v1/topics/orders/dead/replay", "{}")
	want(t, r, 200)
	if c := into[wire.CountResponse](t, r); c.Count != 1 {
		t.Fatalf("replay all answer %s", r.raw)
	}
	kill("o-1")
	r = b.do(t, "DELETE", "/v1/topics/orders/dead/o-1", "")
	want(t, r, 200)
	want(t, b.do(t, "DELETE", "/v1/topics/orders/dead/o-1", ""), 404)
	r = b.do(t, "DELETE", "/v1/topics/orders/dead", "")
	want(t, r, 200)
	if c := into[wire.CountResponse](t, r); c.Count != 0 {
		t.Fatalf("purge answer %s", r.raw)
	}

	// Cancel: answers the prior state; again: 404.
	r = b.do(t, "DELETE", "/v1/topics/orders/messages/bin", "")
	want(t, r, 200)
	if cr := into[wire.CancelResponse](t, r); !cr.Cancelled || cr.PriorState != "scheduled" || cr.Message.ID != "bin" {
		t.Fatalf("cancel answer %s", r.raw)
	}
	want(t, b.do(t, "DELETE", "/v1/topics/orders/messages/bin", ""), 404)

	// Topics.
	want(t, b.do(t, "POST", "/v1/topics/orders/messages", `{"id":"later","payload":"","delay":"1h"}`), 201)
	r = b.do(t, "GET", "/v1/topics", "")
	want(t, r, 200)
	if tr := into[wire.TopicsResponse](t, r); len(tr.Topics) != 1 || tr.Topics[0].Name != "orders" || tr.Topics[0].Counts.Scheduled != 1 || tr.Topics[0].NextDue == nil {
		t.Fatalf("topics answer %s", r.raw)
	}
	r = b.do(t, "GET", "/v1/topics/orders", "")
	want(t, r, 200)
	if tp := into[wire.Topic](t, r); tp.Name != "orders" || tp.Settings.MaxAttempts != 1 {
		t.Fatalf("topic answer %s", r.raw)
	}
	want(t, b.do(t, "GET", "/v1/topics/nosuch", ""), 404)

	// Health, readiness, reserved and unknown routes.
	want(t, b.do(t, "GET", "/healthz", ""), 200)
	want(t, b.do(t, "GET", "/readyz", ""), 200)
	r = b.do(t, "GET", "/v1/schedules", "")
	if r.status != http.StatusNotImplemented || r.err.Code != wire.CodeNotImplemented {
		t.Fatalf("schedules: %d %s", r.status, r.raw)
	}
	r = b.do(t, "GET", "/metrics", "")
	if r.status != 404 || r.err.Code != wire.CodeNotFound {
		t.Fatalf("metrics without a registry: %d %s", r.status, r.raw)
	}
	r = b.do(t, "GET", "/v1/admin/backup", "")
	if r.status != http.StatusNotImplemented || r.err.Code != wire.CodeNotImplemented || !strings.Contains(r.err.Message, "own tools") {
		t.Fatalf("backup on a store without one: %d %s", r.status, r.raw)
	}
	r = b.do(t, "GET", "/v2/nothing", "")
	if r.status != 404 || r.err.Code != wire.CodeNotFound || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("unknown route: %d %v %s", r.status, r.header, r.raw)
	}
	r = b.do(t, "DELETE", "/v1/topics/orders/lease", "")
	if r.status != 405 || r.err.Code != wire.CodeMethod || r.header.Get("Allow") == "" {
		t.Fatalf("wrong method: %d %v %s", r.status, r.header, r.raw)
	}
}

// TestDeliverAtEpoch: a deliver_at of the Unix epoch is a time in the
// past (due now), answered as given — not as Go's zero time
// "0001-01-01T00:00:00Z", which it was because 0 ms meant "unset".
func TestDeliverAtEpoch(t *testing.T) {
	b := setup(t, nil)
	r := b.do(t, "POST", "/v1/topics/t/messages", `{"id":"epoch","payload":"x","deliver_at":"1970-01-01T00:00:00Z"}`)
	want(t, r, 201)
	if m := into[wire.Message](t, r); m.State != "ready" || !m.DeliverAt.Equal(time.Unix(0, 0)) {
		t.Fatalf("send answer %s", r.raw)
	}
	r = b.do(t, "GET", "/v1/topics/t/messages/epoch", "")
	want(t, r, 200)
	if !strings.Contains(string(r.raw), `"deliver_at":"1970-01-01T00:00:00Z"`) {
		t.Fatalf("get answer %s", r.raw)
	}
}
