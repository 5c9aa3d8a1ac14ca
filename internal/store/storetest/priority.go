package storetest

import (
	"strconv"

	"github.com/delayq/delayq/internal/store"
)

// testPriority checks the lease order (Priority, DueAt, Seq) among due
// messages: priority never makes a message early, a ready message not yet
// due holds back nothing, and a message keeps its priority through
// retries, lease expiry, reschedule and replay. The ready list follows the
// lease order, with the due range applied within each priority.
func testPriority(h *harness) {
	t, now := h.t, T0
	p := withPriority
	// Ready at insert, out of every order; the full range of priorities.
	h.insertNew("t", now,
		p(msg("p5-old", now-50), 5), msg("p0-new", now-5), p(msg("p255", now-100), 255),
		p(msg("p5-new", now-10), 5), msg("p0-old", now-20), p(msg("p5-tie", now-10), 5),
		p(msg("p1-sched", now+10), 1), msg("p0-sched", now+20))
	if g := h.get("t", "p255"); g.Priority != 255 {
		t.Errorf("MessageGet p255: Priority %d", g.Priority)
	}
	if tr := h.topic("t"); tr.OldestReady != now-100 {
		t.Errorf("TopicGet: OldestReady %d, want -100 whatever its priority", tr.OldestReady-now)
	}
	readyOrder := []string{"p0-old", "p0-new", "p5-old", "p5-new", "p5-tie", "p255"}
	for limit := 1; limit <= len(readyOrder)+1; limit++ {
		wantIDs(t, "MessageList ready limit "+strconv.Itoa(limit), h.listAll(listParams("t", store.StateReady, limit)), readyOrder...)
	}
	lp := listParams("t", store.StateReady, 1)
	lp.DueFrom, lp.DueTo = now-20, now-5
	wantIDs(t, "MessageList ready in [-20, -5)", h.listAll(lp), "p0-old", "p5-new", "p5-tie")

	got := h.lease("t", now, 2, now+1000)
	wantIDs(t, "lease priority 0 first", got, "p0-old", "p0-new")
	for _, r := range got {
		if r.Priority != 0 {
			t.Errorf("leased %s: Priority %d", r.ID, r.Priority)
		}
	}
	// Priority never makes a message early: p1-sched and p0-sched are not
	// due; once promoted, each goes before every lower priority.
	h.wantPromote("t", now+10, 10, 1, now+20)
	wantIDs(t, "lease after p1 came due", h.lease("t", now+10, 2, now+1000), "p1-sched", "p5-old")
	h.wantPromote("t", now+20, 10, 1, 0)
	got = h.lease("t", now+20, 1, now+1000)
	wantIDs(t, "lease after p0 came due", got, "p0-sched")

	// A ready message not yet due by this call's Now (a promotion with a
	// later clock reading) is skipped, not a barrier.
	h.insertNew("t", now+30, p(msg("p2-future", now+30), 2))
	wantIDs(t, "lease at a Now before p2-future's due", h.lease("t", now+25, 1, now+1000), "p5-new")

	// Kept through nack (retry promoted back), lease expiry and reschedule.
	r := got[0]
	back, err := h.nack("t", r.ID, r.Receipt, now+30, now+40, "boom")
	noErr(t, "nack", err)
	if back.Priority != 0 {
		t.Errorf("nacked %s: Priority %d", back.ID, back.Priority)
	}
	h.wantPromote("t", now+40, 10, 1, 0)
	wantIDs(t, "lease after retry", h.lease("t", now+40, 2, now+50), "p0-sched", "p2-future")
	exp := h.expire(now+50, 10)
	if len(exp) != 2 {
		t.Fatalf("LeaseExpire: %d records, want 2", len(exp))
	}
	wantPrio := map[string]uint8{"p0-sched": 0, "p2-future": 2}
	for _, r := range exp {
		if prio, ok := wantPrio[r.ID]; !ok || r.State != store.StateReady || r.Priority != prio {
			t.Errorf("expired: %s (Priority %d)", fmtRec(r), r.Priority)
		}
	}
	rs, err := h.s.MessageReschedule(h.ctx, &store.MessageRescheduleParams{Topic: "t", ID: "p255", DueAt: now + 60, Now: now + 50})
	noErr(t, "reschedule", err)
	if rs.Priority != 255 {
		t.Errorf("rescheduled p255: Priority %d", rs.Priority)
	}
	wantIDs(t, "lease after expiry", h.lease("t", now+55, 10, now+1000), "p0-sched", "p2-future", "p5-tie")
	h.wantPromote("t", now+60, 10, 1, 0)
	wantIDs(t, "lease rescheduled", h.lease("t", now+60, 10, now+1000), "p255")

	// Kept through dead letters and replay.
	h.insertNew("d", now, p(msg("x", now), 7))
	h.kill("d", "x", now)
	h.insertNew("d", now, p(msg("y", now), 9), msg("z", now))
	rep, err := h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "d", ID: "x", Now: now + 1})
	noErr(t, "DeadReplay", err)
	if len(rep) != 1 || rep[0].Priority != 7 {
		t.Fatalf("DeadReplay: %v", rep)
	}
	wantIDs(t, "lease after replay", h.lease("d", now+1, 10, now+1000), "z", "x", "y")

	// Many messages across priorities and dues: the lease order holds
	// through paging and a cursor taken mid-way.
	var msgs []store.InsertMessage
	want := map[uint8][]string{}
	for i := range 60 {
		prio := []uint8{0, 3, 200, 255}[i%4]
		id := "m" + strconv.Itoa(i)
		msgs = append(msgs, p(msg(id, now-int64(100-i)), prio))
		want[prio] = append(want[prio], id)
	}
	h.insertNew("many", now, msgs...)
	var order []string
	for _, prio := range []uint8{0, 3, 200, 255} {
		order = append(order, want[prio]...)
	}
	wantIDs(t, "MessageList many", h.listAll(listParams("many", store.StateReady, 7)), order...)
	all := h.lease("many", now, 1000, now+1000)
	wantIDs(t, "lease many", all, order...)
}
