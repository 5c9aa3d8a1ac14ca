package storetest

import (
	"slices"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

// makeDead kills messages of topic t in the given order at the given
// times; ids are inserted in alphabetical order so that ties in DeadAt
// must be broken by Seq, not by time of death.
func makeDead(h *harness, topic string, deaths []death) {
	var msgs []store.InsertMessage
	sorted := slices.Clone(deaths)
	slices.SortFunc(sorted, func(a, b death) int { return strings.Compare(a.id, b.id) })
	for _, d := range sorted {
		msgs = append(msgs, withMax(msg(d.id, T0+1_000_000), 1))
	}
	h.insertNew(topic, T0-1000, msgs...)
	for _, d := range deaths {
		_, err := h.s.MessageReschedule(h.ctx, &store.MessageRescheduleParams{Topic: topic, ID: d.id, DueAt: T0 - 1000, Now: d.at})
		noErr(h.t, "reschedule", err)
		if got := h.kill(topic, d.id, d.at); got.DeadAt != d.at || got.LastError != "boom" {
			h.t.Errorf("killed %s: %s", d.id, fmtRec(got))
		}
	}
}

type death struct {
	id string
	at int64
}

// deadFixture: 7 dead in "t", 1 in "u", and live messages in "t".
func deadFixture(h *harness) []string {
	now := T0
	makeDead(h, "t", []death{{"g", now + 5}, {"b", now + 5}, {"e", now + 3}, {"a", now + 9}, {"d", now + 5}, {"f", now + 1}, {"c", now + 9}})
	makeDead(h, "u", []death{{"a", now + 2}})
	h.insertNew("t", now, msg("live1", now+50), msg("live2", now))
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Dead: 7})
	// (DeadAt, Seq) order; Seq is alphabetical.
	return []string{"f", "e", "b", "d", "g", "a", "c"}
}

func testDeadList(h *harness) {
	t := h.t
	order := deadFixture(h)
	for limit := 1; limit <= 8; limit++ {
		all := h.deadAll("t", limit)
		wantIDs(t, "DeadList limit "+strconv.Itoa(limit), all, order...)
		for _, r := range all {
			Equal(t, h.get("t", r.ID), r)
			if r.State != store.StateDead || r.DeadAt == 0 || r.LastError != "boom" || len(r.Payload) == 0 {
				t.Errorf("dead record: %s", fmtRec(r))
			}
		}
	}
	wantIDs(t, "DeadList of u", h.deadAll("u", 5), "a")
	recs, next, err := h.s.DeadList(h.ctx, &store.DeadListParams{Topic: "nope", Limit: 5})
	if err != nil || len(recs) != 0 || next != "" {
		t.Errorf("DeadList of unknown topic: %v %q %v", recs, next, err)
	}

	// The cursor is a position: removing returned items (and replaying
	// one) between pages skips nothing that is still dead.
	page, cursor, err := h.s.DeadList(h.ctx, &store.DeadListParams{Topic: "t", Limit: 3})
	noErr(t, "DeadList", err)
	wantIDs(t, "first page", page, "f", "e", "b")
	if cursor == "" {
		t.Fatal("first page of 3 of 7 without cursor")
	}
	n, err := h.s.DeadDelete(h.ctx, &store.DeadDeleteParams{Topic: "t", ID: "b"})
	noErr(t, "DeadDelete", err)
	if n != 1 {
		t.Errorf("DeadDelete one: %d", n)
	}
	_, err = h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "t", ID: "e", Now: T0 + 20})
	noErr(t, "DeadReplay", err)
	var rest []*store.Record
	for i := 0; cursor != ""; i++ {
		if i > 100 {
			t.Fatal("DeadList does not end")
		}
		page, cursor, err = h.s.DeadList(h.ctx, &store.DeadListParams{Topic: "t", Limit: 2, Cursor: cursor})
		noErr(t, "DeadList", err)
		rest = append(rest, page...)
	}
	wantIDs(t, "pages after removals", rest, "d", "g", "a", "c")

	// A cursor the store did not make is the caller's mistake, not a
	// page that does not exist.
	for _, bad := range []string{"zz", "not a cursor", "0.", "."} {
		_, _, err = h.s.DeadList(h.ctx, &store.DeadListParams{Topic: "t", Limit: 2, Cursor: bad})
		wantErr(t, "DeadList with cursor "+bad, err, store.ErrBadCursor)
	}
}

func testDeadReplay(h *harness) {
	t, now := h.t, T0+100
	order := deadFixture(h)
	before := h.get("t", "a")
	got, err := h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "t", ID: "a", Now: now})
	noErr(t, "DeadReplay a", err)
	want := *before
	want.State, want.DueAt, want.Failures, want.DeadAt, want.UpdatedAt = store.StateReady, now, 0, 0, now
	if len(got) != 1 {
		t.Fatalf("DeadReplay one: %d records", len(got))
	}
	Equal(t, &want, got[0])
	Equal(t, &want, h.get("t", "a"))
	h.counts("t", store.Counts{Scheduled: 1, Ready: 2, Dead: 6})
	for _, c := range []struct{ topic, id string }{{"t", "live1"}, {"t", "live2"}, {"t", "a"}, {"t", "zz"}, {"zz", "a"}} {
		_, err := h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: c.topic, ID: c.id, Now: now})
		wantErr(t, "DeadReplay of "+c.topic+"/"+c.id, err, store.ErrNotFound)
	}
	// Up to Max, oldest first.
	got, err = h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "t", Now: now + 1, Max: 2})
	noErr(t, "DeadReplay max 2", err)
	wantIDs(t, "DeadReplay max 2", got, order[0], order[1])
	for _, r := range got {
		if r.State != store.StateReady || r.DueAt != now+1 || r.Failures != 0 || r.LastError != "boom" {
			t.Errorf("replayed: %s", fmtRec(r))
		}
	}
	got, err = h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "t", Now: now + 2, Max: 100})
	noErr(t, "DeadReplay rest", err)
	wantIDs(t, "DeadReplay rest", got, "b", "d", "g", "c")
	got, err = h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "t", Now: now + 2, Max: 100})
	if err != nil || len(got) != 0 {
		t.Errorf("DeadReplay with none dead: %v %v", ids(got), err)
	}
	got, err = h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "nope", Now: now, Max: 100})
	if err != nil || len(got) != 0 {
		t.Errorf("DeadReplay of unknown topic: %v %v", ids(got), err)
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 8})
	h.counts("u", store.Counts{Dead: 1})
	// Replayed messages are leased in (DueAt, Seq) order and can die again.
	wantIDs(t, "lease after replay", h.lease("t", now+2, 100, now+10), "live2", "a", "e", "f", "b", "c", "d", "g")
	for _, r := range h.expire(now+10, 100) {
		if r.ID != "live2" && r.State != store.StateDead || r.Failures != 1 {
			t.Errorf("replayed message with MaxAttempts 1, expired: %s", fmtRec(r))
		}
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Dead: 7})
}

func testDeadDelete(h *harness) {
	t := h.t
	order := deadFixture(h)
	del := func(p store.DeadDeleteParams, want int) {
		t.Helper()
		n, err := h.s.DeadDelete(h.ctx, &p)
		noErr(t, "DeadDelete", err)
		if n != want {
			t.Errorf("DeadDelete(%+v): %d, want %d", p, n, want)
		}
	}
	del(store.DeadDeleteParams{Topic: "t", ID: "g"}, 1)
	h.gone("t", "g")
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Dead: 6})
	for _, c := range []struct{ topic, id string }{{"t", "live1"}, {"t", "live2"}, {"t", "g"}, {"zz", "a"}} {
		_, err := h.s.DeadDelete(h.ctx, &store.DeadDeleteParams{Topic: c.topic, ID: c.id})
		wantErr(t, "DeadDelete of "+c.topic+"/"+c.id, err, store.ErrNotFound)
	}
	del(store.DeadDeleteParams{Topic: "t", Max: 2}, 2)
	h.gone("t", order[0])
	h.gone("t", order[1])
	wantIDs(t, "dead after delete max 2", h.deadAll("t", 10), "b", "d", "a", "c")
	del(store.DeadDeleteParams{Topic: "t", Max: 100}, 4)
	del(store.DeadDeleteParams{Topic: "t", Max: 100}, 0)
	del(store.DeadDeleteParams{Topic: "nope", Max: 100}, 0)
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1})
	h.counts("u", store.Counts{Dead: 1})
	// Deleted means gone: the id is new again.
	h.insertNew("t", T0, msg("g", T0))
}
