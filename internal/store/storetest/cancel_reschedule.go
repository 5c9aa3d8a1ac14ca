package storetest

import (
	"github.com/delayq/delayq/internal/store"
)

func testCancel(h *harness) {
	t, now := h.t, T0
	recs := setupStates(h, now)
	counts := store.Counts{Scheduled: 1, Ready: 1, Inflight: 1, Dead: 1, Acked: 1}
	for _, id := range []string{"s", "r", "i"} {
		got, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "t", ID: id, Now: now + 1})
		noErr(t, "cancel "+id, err)
		Equal(t, recs[id], got) // as it was
		h.gone("t", id)
		switch id {
		case "s":
			counts.Scheduled--
		case "r":
			counts.Ready--
		case "i":
			counts.Inflight--
		}
		h.counts("t", counts)
	}
	wantErr(t, "ack of a cancelled message", h.ack("t", "i", recs["i"].Receipt, now), store.ErrNotFound)
	h.wantPromote("t", now+1000, 10, 0, 0)
	wantIDs(t, "lease after cancels", h.lease("t", now+1000, 10, now+2000))
	for _, id := range []string{"d", "k"} {
		_, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "t", ID: id, Now: now + 1})
		wantErr(t, "cancel "+recs[id].State.String(), err, store.ErrConflict)
		Equal(t, recs[id], h.get("t", id))
	}
	_, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "t", ID: "zz", Now: now})
	wantErr(t, "cancel unknown id", err, store.ErrNotFound)
	_, err = h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "zz", ID: "s", Now: now})
	wantErr(t, "cancel unknown topic", err, store.ErrNotFound)
	// No tombstone: the id may be sent again, as a new message.
	again := h.insertNew("t", now+2, msg("i", now+2))
	if again[0].Seq <= recs["s"].Seq {
		t.Errorf("re-sent message has Seq %d, not above %d", again[0].Seq, recs["s"].Seq)
	}
	h.counts("t", store.Counts{Ready: 1, Dead: 1, Acked: 1})
}

func testReschedule(h *harness) {
	t, now := h.t, T0
	resched := func(id string, due, at int64) (*store.Record, error) {
		return h.s.MessageReschedule(h.ctx, &store.MessageRescheduleParams{Topic: "t", ID: id, DueAt: due, Now: at})
	}
	recs := setupStates(h, now)
	h.insertNew("t", now, msg("s2", now+50), msg("s3", now+60), msg("r2", now-3))
	// scheduled -> later: scheduled.
	got, err := resched("s", now+900, now+1)
	noErr(t, "reschedule s", err)
	want := *recs["s"]
	want.DueAt, want.UpdatedAt = now+900, now+1
	Equal(t, &want, got)
	Equal(t, &want, h.get("t", "s"))
	// scheduled -> past and -> exactly now: ready.
	for _, c := range []struct {
		id  string
		due int64
	}{{"s2", now - 7}, {"s3", now + 1}} {
		got, err := resched(c.id, c.due, now+1)
		noErr(t, "reschedule "+c.id, err)
		if got.State != store.StateReady || got.DueAt != c.due || got.UpdatedAt != now+1 {
			t.Errorf("reschedule %s to %d: %s", c.id, c.due-now, fmtRec(got))
		}
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 4, Inflight: 1, Dead: 1, Acked: 1})
	// ready -> future: scheduled; ready -> other past time: ready.
	got, err = resched("r", now+500, now+2)
	noErr(t, "reschedule r", err)
	if got.State != store.StateScheduled || got.DueAt != now+500 || got.Seq != recs["r"].Seq {
		t.Errorf("reschedule ready to future: %s", fmtRec(got))
	}
	got, err = resched("r2", now-100, now+2)
	noErr(t, "reschedule r2", err)
	if got.State != store.StateReady || got.DueAt != now-100 {
		t.Errorf("reschedule ready to past: %s", fmtRec(got))
	}
	h.counts("t", store.Counts{Scheduled: 2, Ready: 3, Inflight: 1, Dead: 1, Acked: 1})
	if tr := h.topic("t"); tr.NextDue != now+500 || tr.OldestReady != now-100 {
		t.Errorf("TopicGet after reschedules: %+v", *tr)
	}
	wantIDs(t, "lease in new order", h.lease("t", now+3, 10, now+100), "r2", "s2", "s3")
	h.wantPromote("t", now+500, 10, 1, now+900)

	for _, id := range []string{"i", "d", "k"} {
		before := h.get("t", id)
		_, err := resched(id, now, now+3)
		wantErr(t, "reschedule "+before.State.String(), err, store.ErrConflict)
		Equal(t, before, h.get("t", id))
	}
	_, err = resched("zz", now, now)
	wantErr(t, "reschedule unknown id", err, store.ErrNotFound)
	_, err = h.s.MessageReschedule(h.ctx, &store.MessageRescheduleParams{Topic: "zz", ID: "s", DueAt: now, Now: now})
	wantErr(t, "reschedule unknown topic", err, store.ErrNotFound)

	// Rescheduling keeps Seq: x (sent first) stays ahead of y on a tie
	// even after moving away and back.
	h.insertNew("o", now, msg("x", now+10), msg("y", now+10))
	for _, due := range []int64{now + 30, now + 10} {
		_, err = h.s.MessageReschedule(h.ctx, &store.MessageRescheduleParams{Topic: "o", ID: "x", DueAt: due, Now: now})
		noErr(t, "reschedule x", err)
	}
	h.promote("o", now+10, 10)
	wantIDs(t, "tie after reschedule", h.lease("o", now+10, 10, now+100), "x", "y")
}
