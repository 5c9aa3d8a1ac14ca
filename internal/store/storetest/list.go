package storetest

import (
	"math"
	"strconv"

	"github.com/delayq/delayq/internal/store"
)

// listAll pages MessageList to the end with the given limit.
func (h *harness) listAll(p store.MessageListParams) []*store.Record {
	h.t.Helper()
	var all []*store.Record
	for page := 0; ; page++ {
		if page > 10000 {
			h.t.Fatalf("MessageList(%s): no end after %d pages", p.Topic, page)
		}
		recs, next, err := h.s.MessageList(h.ctx, &p)
		if err != nil {
			h.t.Fatalf("MessageList(%s %s): %v", p.Topic, p.State, err)
		}
		if len(recs) > p.Limit {
			h.t.Fatalf("MessageList(%s, limit=%d): page of %d", p.Topic, p.Limit, len(recs))
		}
		if len(recs) == 0 && next != "" {
			h.t.Fatalf("MessageList(%s): empty page with cursor %q", p.Topic, next)
		}
		all = append(all, recs...)
		if next == "" {
			return all
		}
		p.Cursor = next
	}
}

func listParams(topic string, st store.State, limit int) store.MessageListParams {
	return store.MessageListParams{Topic: topic, State: st, DueFrom: math.MinInt64, DueTo: math.MaxInt64, Limit: limit}
}

func testMessageList(h *harness) {
	t, now := h.t, T0
	makeDead(h, "t", []death{{"d1", now + 5}, {"d2", now + 3}})
	h.insertNew("t", now-2000, msg("i1", now-1000), msg("i2", now-999))
	h.promote("t", now, 10)
	h.leaseOne("t", "i1", now, now+5000)
	h.leaseOne("t", "i2", now, now+4000)
	h.insertNew("t", now, msg("s3", now+300), msg("s1", now+100), msg("s2a", now+200), msg("s2b", now+200), msg("s4", now+400),
		msg("r2", now-10), msg("r1", now-20), msg("r3", now-10))
	h.insertNew("u", now, msg("s0", now+150), msg("r0", now-5))
	h.counts("t", store.Counts{Scheduled: 5, Ready: 3, Inflight: 2, Dead: 2})

	want := map[store.State][]string{
		store.StateScheduled: {"s1", "s2a", "s2b", "s3", "s4"},
		store.StateReady:     {"r1", "r2", "r3"},
		store.StateInflight:  {"i2", "i1"}, // by LeaseUntil
		store.StateDead:      {"d2", "d1"}, // by DeadAt
	}
	for st, order := range want {
		for limit := 1; limit <= len(order)+1; limit++ {
			all := h.listAll(listParams("t", st, limit))
			wantIDs(t, "MessageList "+st.String()+" limit "+strconv.Itoa(limit), all, order...)
			for _, r := range all {
				Equal(t, h.get("t", r.ID), r)
			}
		}
	}
	wantIDs(t, "MessageList of u", h.listAll(listParams("u", store.StateScheduled, 10)), "s0")
	wantIDs(t, "MessageList of unknown topic", h.listAll(listParams("nope", store.StateReady, 10)))

	// The due-time range: DueFrom <= DueAt < DueTo.
	p := listParams("t", store.StateScheduled, 1)
	p.DueFrom, p.DueTo = now+200, now+400
	wantIDs(t, "MessageList scheduled in [200, 400)", h.listAll(p), "s2a", "s2b", "s3")
	p.Limit = 10
	p.DueFrom, p.DueTo = now+101, now+200
	wantIDs(t, "MessageList scheduled in [101, 200)", h.listAll(p))
	p = listParams("t", store.StateReady, 2)
	p.DueFrom = now - 10
	wantIDs(t, "MessageList ready from -10", h.listAll(p), "r2", "r3")
	p = listParams("t", store.StateReady, 2)
	p.DueTo = now - 10
	wantIDs(t, "MessageList ready before -10", h.listAll(p), "r1")

	// A cursor is a position: messages added before it are not shown,
	// removing returned ones skips nothing, ties after it follow by Seq.
	p = listParams("t", store.StateScheduled, 2)
	first, next, err := h.s.MessageList(h.ctx, &p)
	noErr(t, "MessageList", err)
	wantIDs(t, "first page", first, "s1", "s2a")
	if next == "" {
		t.Fatal("MessageList: no cursor after a full page with more to come")
	}
	h.insertNew("t", now, msg("s0", now+50), msg("s2c", now+200), msg("s5", now+500))
	if _, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "t", ID: "s2a", Now: now}); err != nil {
		t.Fatal(err)
	}
	p.Cursor = next
	wantIDs(t, "pages after the cursor", h.listAll(p), "s2b", "s2c", "s3", "s4", "s5")

	p = listParams("t", store.StateScheduled, 2)
	p.Cursor = "not a cursor"
	_, _, err = h.s.MessageList(h.ctx, &p)
	wantErr(t, "MessageList with a bad cursor", err, store.ErrBadCursor)
}
