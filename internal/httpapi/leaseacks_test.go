package httpapi

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// TestLeaseCarriesAcks: a lease's acks are carried out before it leases,
// each answered in order (a stale receipt is a conflict that does not
// stop the lease), durably before a long-poll waits, idempotent when
// sent again; a malformed item rejects the whole call and acks nothing.
func TestLeaseCarriesAcks(t *testing.T) {
	b := setup(t, nil)
	want200(t, b.do(t, "POST", "/v1/topics/q/messages:batch", `{"messages":[{"id":"a","payload":"1"},{"id":"b","payload":"2"},{"id":"c","payload":"3"}]}`))
	r := b.do(t, "POST", "/v1/topics/q/lease", `{"max":2}`)
	want200(t, r)
	first := into[wire.MessagesResponse](t, r)
	if len(first.Messages) != 2 || first.Acks != nil || strings.Contains(string(r.raw), `"acks"`) {
		t.Fatalf("plain lease answer %s", r.raw)
	}
	a, bm := first.Messages[0], first.Messages[1]
	ackOf := func(id, receipt string) string { return `{"id":"` + id + `","receipt":"` + receipt + `"}` }

	// Malformed: 400 naming the item, nothing acked, nothing leased.
	r = b.do(t, "POST", "/v1/topics/q/lease", `{"max":10,"acks":[`+ackOf(a.ID, a.Receipt)+`,{"id":"`+bm.ID+`","receipt":""}]}`)
	want(t, r, 400)
	if r.err.Field != "acks[1].receipt" {
		t.Fatalf("malformed ack answered %s", r.raw)
	}
	many := make([]string, 1001)
	for i := range many {
		many[i] = ackOf(a.ID, a.Receipt)
	}
	r = b.do(t, "POST", "/v1/topics/q/lease", `{"acks":[`+strings.Join(many, ",")+`]}`)
	want(t, r, 400)
	if r.err.Field != "acks" || !strings.Contains(r.err.Message, "at most 1000 items, got 1001") {
		t.Fatalf("1001 acks with a lease answered %s, want field acks saying at most 1000", r.raw)
	}
	if m := into[wire.Message](t, b.do(t, "GET", "/v1/topics/q/messages/"+a.ID, "")); m.State != "inflight" {
		t.Fatalf("a rejected call acked %s: %s", a.ID, m.State)
	}

	// a acked, b's stale receipt a conflict, and c leased in the same call.
	r = b.do(t, "POST", "/v1/topics/q/lease", `{"max":10,"acks":[`+ackOf(a.ID, a.Receipt)+`,`+ackOf(bm.ID, "stale")+`]}`)
	want200(t, r)
	got := into[wire.MessagesResponse](t, r)
	if len(got.Acks) != 2 || !got.Acks[0].OK || got.Acks[0].ID != a.ID || got.Acks[1].OK || got.Acks[1].Error == nil || got.Acks[1].Error.Code != wire.CodeConflict {
		t.Fatalf("acks answered %s", r.raw)
	}
	if len(got.Messages) != 1 || got.Messages[0].ID != "c" {
		t.Fatalf("lease after acks answered %s", r.raw)
	}
	c := got.Messages[0]
	if m := into[wire.Message](t, b.do(t, "GET", "/v1/topics/q/messages/"+a.ID, "")); m.State != "acked" {
		t.Fatalf("%s is %s after its ack", a.ID, m.State)
	}
	if m := into[wire.Message](t, b.do(t, "GET", "/v1/topics/q/messages/"+bm.ID, "")); m.State != "inflight" {
		t.Fatalf("%s is %s after a stale ack", bm.ID, m.State)
	}

	// A long-poll that finds nothing: its acks are done before it waits
	// (seen from another call meanwhile) and answered when it returns;
	// a's ack sent again is ok.
	done := make(chan resp, 1)
	go func() {
		done <- b.do(t, "POST", "/v1/topics/q/lease", `{"wait":"1s","acks":[`+ackOf(bm.ID, bm.Receipt)+`,`+ackOf(c.ID, c.Receipt)+`,`+ackOf(a.ID, a.Receipt)+`]}`)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := into[wire.Message](t, b.do(t, "GET", "/v1/topics/q/messages/"+c.ID, ""))
		if m.State == "acked" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %s while the lease carrying its ack waits", c.ID, m.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("the lease returned before its wait ended: %s", r.raw)
	default:
	}
	r = <-done
	want200(t, r)
	got = into[wire.MessagesResponse](t, r)
	if len(got.Messages) != 0 || len(got.Acks) != 3 || !got.Acks[0].OK || !got.Acks[1].OK || !got.Acks[2].OK {
		t.Fatalf("long-poll with acks answered %s", r.raw)
	}
	r = b.do(t, "GET", "/v1/topics/q", "")
	want200(t, r)
	if ts := into[wire.Topic](t, r); ts.Counts != (wire.Counts{}) {
		t.Fatalf("topic after the acks: %s", r.raw)
	}
}
