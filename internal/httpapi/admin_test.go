package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

func pageIDs(p wire.MessagePage) string {
	var ids []string
	for _, m := range p.Messages {
		ids = append(ids, m.ID)
	}
	return strings.Join(ids, ",")
}

func TestBrowseBulkPause(t *testing.T) {
	b := setup(t, nil)
	base := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for i := range 5 {
		at := base.Add(time.Duration(5-i) * time.Minute).Format(time.RFC3339Nano) // m4 soonest
		want(t, b.do(t, "POST", "/v1/topics/t/messages", fmt.Sprintf(`{"id":"m%d","payload":"x","deliver_at":%q}`, i, at)), http.StatusCreated)
	}
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"r","payload":"x"}`), http.StatusCreated)

	// Browse by state, two at a time, following next_cursor.
	var all []string
	path := "/v1/topics/t/messages?state=scheduled&limit=2"
	for range 10 {
		r := b.do(t, "GET", path, "")
		want(t, r, http.StatusOK)
		p := into[wire.MessagePage](t, r)
		all = append(all, pageIDs(p))
		if p.Next == "" {
			break
		}
		path = "/v1/topics/t/messages?state=scheduled&limit=2&cursor=" + url.QueryEscape(p.Next)
	}
	if got := strings.Join(all, "|"); got != "m4,m3|m2,m1|m0" {
		t.Fatalf("pages %s", got)
	}
	q := url.Values{"state": {"scheduled"}, "due_after": {base.Add(2 * time.Minute).Format(time.RFC3339Nano)}, "due_before": {base.Add(4 * time.Minute).Format(time.RFC3339Nano)}}
	r := b.do(t, "GET", "/v1/topics/t/messages?"+q.Encode(), "")
	want(t, r, http.StatusOK)
	if got := pageIDs(into[wire.MessagePage](t, r)); got != "m3,m2" {
		t.Fatalf("due range: %s", got)
	}
	r = b.do(t, "GET", "/v1/topics/t/messages?state=ready", "")
	want(t, r, http.StatusOK)
	if got := pageIDs(into[wire.MessagePage](t, r)); got != "r" {
		t.Fatalf("ready: %s", got)
	}
	for _, c := range []struct{ query, field string }{
		{"", "state"},
		{"state=acked", "state"},
		{"state=ready&limit=1001", "limit"},
		{"state=ready&limit=0", "limit"},
		{"state=ready&due_after=yesterday", "due_after"},
		{"state=dead&due_before=2030-01-01T00:00:00Z", "due_after"},
		{"state=ready&cursor=nonsense", "cursor"},
	} {
		r := b.do(t, "GET", "/v1/topics/t/messages?"+c.query, "")
		if r.status != http.StatusBadRequest || r.err.Field != c.field {
			t.Errorf("?%s: %d %+v, want 400 naming %s", c.query, r.status, r.err, c.field)
		}
	}

	// Bulk: reschedule a window, then cancel by filter; each answers a count.
	body := fmt.Sprintf(`{"filter":{"state":"scheduled","due_before":%q},"deliver_at":%q}`,
		base.Add(3*time.Minute).Format(time.RFC3339Nano), base.Add(time.Hour).Format(time.RFC3339Nano))
	r = b.do(t, "POST", "/v1/topics/t/messages:reschedule", body)
	want(t, r, http.StatusOK)
	if n := into[wire.CountResponse](t, r).Count; n != 2 {
		t.Fatalf("rescheduled %d, want 2 (m4, m3)", n)
	}
	for _, c := range []struct{ body, field string }{
		{`{}`, "filter"},
		{`{"filter":{"state":"inflight"}}`, "filter.state"},
		{`{"filter":{"state":"dead"}}`, "filter.state"},
		{`{"filter":{},"delay_ms":5}`, "delay"},
	} {
		r := b.do(t, "POST", "/v1/topics/t/messages:cancel", c.body)
		if r.status != http.StatusBadRequest || r.err.Field != c.field {
			t.Errorf("cancel %s: %d %+v, want 400 naming %s", c.body, r.status, r.err, c.field)
		}
	}
	r = b.do(t, "POST", "/v1/topics/t/messages:reschedule", `{"filter":{}}`)
	if r.status != http.StatusBadRequest || r.err.Field != "delay" {
		t.Errorf("reschedule without a due time: %d %+v", r.status, r.err)
	}
	r = b.do(t, "POST", "/v1/topics/t/messages:cancel", `{"filter":{"state":"scheduled","due_before":`+fmt.Sprintf("%q", base.Add(30*time.Minute).Format(time.RFC3339Nano))+`}}`)
	want(t, r, http.StatusOK)
	if n := into[wire.CountResponse](t, r).Count; n != 3 {
		t.Fatalf("cancelled %d, want 3 (m2, m1, m0)", n)
	}

	// Pause: no leases, sends accepted, topic says so; resume.
	r = b.do(t, "POST", "/v1/topics/t/pause", "")
	want(t, r, http.StatusOK)
	if tp := into[wire.Topic](t, r); !tp.Paused {
		t.Fatalf("pause answered %+v", tp)
	}
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"r2","payload":"x"}`), http.StatusCreated)
	r = b.do(t, "POST", "/v1/topics/t/lease", `{"max":10}`)
	want(t, r, http.StatusOK)
	if ms := into[wire.MessagesResponse](t, r); len(ms.Messages) != 0 {
		t.Fatalf("leased %d from a paused topic", len(ms.Messages))
	}
	r = b.do(t, "GET", "/v1/topics/t", "")
	if tp := into[wire.Topic](t, r); !tp.Paused || tp.Counts.Ready != 2 {
		t.Fatalf("paused topic: %+v", tp)
	}
	r = b.do(t, "POST", "/v1/topics/t/resume", "{}")
	want(t, r, http.StatusOK)
	if tp := into[wire.Topic](t, r); tp.Paused {
		t.Fatalf("resume answered %+v", tp)
	}
	r = b.do(t, "POST", "/v1/topics/t/lease", `{"max":10}`)
	if ms := into[wire.MessagesResponse](t, r); len(ms.Messages) != 2 {
		t.Fatalf("leased %d after resume, want 2", len(ms.Messages))
	}
	r = b.do(t, "GET", "/v1/topics/t/messages?state=inflight", "")
	inflight := into[wire.MessagePage](t, r)
	if got := pageIDs(inflight); got != "r,r2" && got != "r2,r" {
		t.Fatalf("inflight: %s", got)
	}

	// Delete: refused, naming what the topic holds, until it is empty.
	r = b.do(t, "DELETE", "/v1/topics/t", "")
	want(t, r, http.StatusConflict)
	if !strings.Contains(string(r.raw), "2 inflight") {
		t.Fatalf("refused delete: %s", r.raw)
	}
	for _, m := range inflight.Messages {
		want(t, b.do(t, "POST", "/v1/topics/t/messages/"+m.ID+"/ack", fmt.Sprintf(`{"receipt":%q}`, m.Receipt)), http.StatusOK)
	}
	r = b.do(t, "POST", "/v1/topics/t/messages:cancel", `{"filter":{"state":"scheduled"}}`)
	want(t, r, http.StatusOK)
	r = b.do(t, "DELETE", "/v1/topics/t", "")
	want(t, r, http.StatusOK)
	want(t, b.do(t, "GET", "/v1/topics/t", ""), http.StatusNotFound)
	want(t, b.do(t, "DELETE", "/v1/topics/t", ""), http.StatusNotFound)
	r = b.do(t, "GET", "/v1/topics", "")
	if strings.Contains(string(r.raw), `"name":"t"`) {
		t.Fatalf("deleted topic listed: %s", r.raw)
	}
	// A send of an acked id is still a duplicate, and makes the topic again.
	r = b.do(t, "POST", "/v1/topics/t/messages", `{"id":"r","payload":"x"}`)
	want(t, r, http.StatusOK)
	want(t, b.do(t, "GET", "/v1/topics/t", ""), http.StatusOK)
}

func TestAdminNotEnabled(t *testing.T) {
	b := setup(t, func(c *Config) { c.Admin = nil })
	r := b.do(t, "GET", "/v1/topics/t/messages?state=ready", "")
	if r.status != http.StatusNotImplemented {
		t.Fatalf("without Admin: %d %s", r.status, r.raw)
	}
}
