package storetest

import (
	"slices"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

func testAck(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("a", now-3), msg("s", now+100), msg("r", now+1))
	l := h.leaseOne("t", "a", now, now+50)
	_, err := h.nack("t", "a", l.Receipt, now+1, now+1, "first try failed")
	noErr(t, "nack", err)
	h.promote("t", now+1, 10)
	l = h.leaseOne("t", "a", now+2, now+50)
	noErr(t, "ack", h.ack("t", "a", l.Receipt, now+5))
	want := *l
	want.State, want.Payload, want.Headers = store.StateAcked, nil, nil
	want.LeaseUntil = 0 // the receipt that acked stays
	want.AckedAt, want.UpdatedAt = now+5, now+5
	Equal(t, &want, h.get("t", "a"))
	if want.Failures != 1 || want.Deliveries != 2 || want.LastError != "first try failed" {
		t.Errorf("tombstone lost history: %s", fmtRec(&want))
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Acked: 1})
	wantErr(t, "second ack", h.ack("t", "a", l.Receipt, now+6), store.ErrConflict)
	_, err = h.nack("t", "a", l.Receipt, now+6, now+6, "x")
	wantErr(t, "nack of acked", err, store.ErrConflict)
	_, err = h.extend("t", "a", l.Receipt, now+6, now+60)
	wantErr(t, "extend of acked", err, store.ErrConflict)
	wantErr(t, "ack of scheduled", h.ack("t", "s", "", now), store.ErrConflict)
	wantErr(t, "ack of ready", h.ack("t", "r", "", now), store.ErrConflict)
	h.insertNew("t", now, withMax(msg("d", now-100), 1))
	d := h.kill("t", "d", now)
	wantErr(t, "ack of dead", h.ack("t", "d", d.Receipt, now), store.ErrConflict)
	Equal(t, &want, h.get("t", "a"))
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Dead: 1, Acked: 1})
}

func testAckMany(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("a", now), msg("b", now), msg("c", now), msg("d", now), msg("e", now+100))
	rs := h.lease("t", now, 4, now+10)
	wantIDs(t, "lease", rs, "a", "b", "c", "d")
	items := []store.AckItem{
		{ID: "a", Receipt: rs[0].Receipt},
		{ID: "b", Receipt: rs[1].Receipt + "x"}, // stale
		{ID: "zz", Receipt: "r"},                // unknown
		{ID: "e", Receipt: "r"},                 // not inflight
		{ID: "c", Receipt: rs[2].Receipt},
		{ID: "a", Receipt: rs[0].Receipt}, // already acked by this call
	}
	errs, err := h.s.MessageAckMany(h.ctx, &store.MessageAckManyParams{Topic: "t", Items: items, Now: now + 1})
	noErr(t, "MessageAckMany", err)
	want := []error{nil, store.ErrConflict, store.ErrNotFound, store.ErrConflict, nil, store.ErrConflict}
	if len(errs) != len(want) {
		t.Fatalf("MessageAckMany: %d results for %d items", len(errs), len(items))
	}
	for i := range want {
		if ErrClass(errs[i]) != ErrClass(want[i]) {
			t.Errorf("item %d (%s): want %v, got %v", i, items[i].ID, want[i], errs[i])
		}
	}
	for i, id := range []string{"a", "b", "c"} {
		if id == "b" {
			continue
		}
		if g := h.get("t", id); g.State != store.StateAcked || g.AckedAt != now+1 || g.Receipt != rs[i].Receipt || g.LeaseUntil != 0 {
			t.Errorf("%s after AckMany: %s; want acked, its receipt %q kept", id, fmtRec(g), rs[i].Receipt)
		}
	}
	Equal(t, rs[1], h.get("t", "b"))
	h.counts("t", store.Counts{Scheduled: 1, Inflight: 2, Acked: 2})

	errs, err = h.s.MessageAckMany(h.ctx, &store.MessageAckManyParams{Topic: "t", Now: now})
	if err != nil || len(errs) != 0 {
		t.Errorf("empty AckMany: %v %v", errs, err)
	}
	errs, err = h.s.MessageAckMany(h.ctx, &store.MessageAckManyParams{Topic: "nope", Now: now, Items: items[:2]})
	noErr(t, "AckMany on unknown topic", err)
	for i, e := range errs {
		wantErr(t, "AckMany item on unknown topic "+strconv.Itoa(i), e, store.ErrNotFound)
	}
}

func testNack(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("m", now), withMax(msg("one", now+1000), 1), withMax(msg("zero", now+2000), 0))
	// Failure 1: retry in the future -> scheduled at RetryAt.
	l := h.leaseOne("t", "m", now, now+30)
	got, err := h.nack("t", "m", l.Receipt, now+1, now+100, "e1")
	noErr(t, "nack 1", err)
	want := *l
	want.State, want.DueAt, want.Failures, want.LastError = store.StateScheduled, now+100, 1, "e1"
	want.LeaseUntil, want.UpdatedAt = 0, now+1 // the receipt stays: the failed delivery's
	Equal(t, &want, got)
	Equal(t, &want, h.get("t", "m"))
	h.counts("t", store.Counts{Scheduled: 3})
	if tr := h.topic("t"); tr.NextDue != now+100 || tr.NextLeaseExpiry != 0 {
		t.Errorf("TopicGet after nack: %+v", *tr)
	}
	h.wantPromote("t", now+99, 10, 0, now+100)
	h.wantPromote("t", now+100, 10, 1, now+1000)

	// Failure 2: RetryAt == now -> ready, due now.
	l = h.leaseOne("t", "m", now+100, now+130)
	got, err = h.nack("t", "m", l.Receipt, now+110, now+110, "e2")
	noErr(t, "nack 2", err)
	if got.State != store.StateReady || got.DueAt != now+110 || got.Failures != 2 || got.LastError != "e2" || got.Deliveries != 2 {
		t.Errorf("nack 2: %s", fmtRec(got))
	}
	h.counts("t", store.Counts{Scheduled: 2, Ready: 1})

	// Failure 3 of MaxAttempts 3: dead, whatever RetryAt says.
	l = h.leaseOne("t", "m", now+120, now+130)
	got, err = h.nack("t", "m", l.Receipt, now+125, now+999, "e3")
	noErr(t, "nack 3", err)
	want = *l
	want.State, want.Failures, want.LastError, want.DeadAt = store.StateDead, 3, "e3", now+125
	want.LeaseUntil, want.UpdatedAt = 0, now+125
	Equal(t, &want, got)
	Equal(t, &want, h.get("t", "m"))
	h.counts("t", store.Counts{Scheduled: 2, Dead: 1})
	_, err = h.nack("t", "m", l.Receipt, now+126, now+126, "again")
	wantErr(t, "nack of dead", err, store.ErrConflict)

	// MaxAttempts 1 and 0: the first failure kills.
	for _, id := range []string{"one", "zero"} {
		_, err := h.s.MessageReschedule(h.ctx, &store.MessageRescheduleParams{Topic: "t", ID: id, DueAt: now, Now: now + 200})
		noErr(t, "reschedule", err)
		l := h.leaseOne("t", id, now+200, now+300)
		got, err := h.nack("t", id, l.Receipt, now+200, now+250, "fatal")
		noErr(t, "nack", err)
		if got.State != store.StateDead || got.Failures != 1 || got.DeadAt != now+200 {
			t.Errorf("nack of %s: %s", id, fmtRec(got))
		}
	}
	h.counts("t", store.Counts{Dead: 3})

	// A retry in the past is ready at RetryAt and ordered by it.
	h.insertNew("t", now+300, msg("p", now+250), msg("q", now+260))
	l = h.leaseOne("t", "p", now+300, now+400)
	got, err = h.nack("t", "p", l.Receipt, now+300, now+255, "back")
	noErr(t, "nack to past", err)
	if got.State != store.StateReady || got.DueAt != now+255 {
		t.Errorf("nack into the past: %s", fmtRec(got))
	}
	h.insertNew("t", now+300, msg("r", now+256))
	wantIDs(t, "order after nack", h.lease("t", now+300, 10, now+400), "p", "r", "q")

	// Errors: not inflight, unknown.
	_, err = h.nack("t", "q", "bad", now+300, now, "x")
	wantErr(t, "nack with wrong receipt", err, store.ErrConflict)
	h.insertNew("t", now+300, msg("s", now+5000))
	_, err = h.nack("t", "s", "", now+300, now, "x")
	wantErr(t, "nack of scheduled", err, store.ErrConflict)
}

// testNackFinal: a final nack dead-letters at once with attempts left,
// counts the failure, ignores the retry delay, and the dead letter can be
// replayed like any other.
func testNackFinal(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("m", now), msg("n", now))
	l := h.leaseOne("t", "m", now, now+30)
	got, err := h.s.MessageNack(h.ctx, &store.MessageNackParams{Topic: "t", ID: "m", Receipt: l.Receipt, Now: now + 1, RetryDelay: 500, Error: "bad input", Final: true})
	noErr(t, "final nack", err)
	want := *l
	want.State, want.Failures, want.LastError, want.DeadAt = store.StateDead, 1, "bad input", now+1
	want.LeaseUntil, want.UpdatedAt = 0, now+1 // the receipt stays: the failed delivery's
	Equal(t, &want, got)
	Equal(t, &want, h.get("t", "m"))
	h.counts("t", store.Counts{Ready: 1, Dead: 1})
	wantIDs(t, "dead letters", h.deadAll("t", 10), "m")
	_, err = h.s.MessageNack(h.ctx, &store.MessageNackParams{Topic: "t", ID: "m", Receipt: l.Receipt, Now: now + 2, Final: true})
	wantErr(t, "final nack of dead", err, store.ErrConflict)
	// The other message is untouched and a plain nack still retries.
	l = h.leaseOne("t", "n", now+3, now+30)
	got, err = h.nack("t", "n", l.Receipt, now+4, now+100, "e")
	noErr(t, "nack", err)
	if got.State != store.StateScheduled || got.Failures != 1 {
		t.Errorf("plain nack after a final one: %s", fmtRec(got))
	}
}

func testExtend(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("m", now), msg("s", now+100))
	l := h.leaseOne("t", "m", now, now+10)
	got, err := h.extend("t", "m", l.Receipt, now+5, now+100)
	noErr(t, "extend", err)
	want := *l
	want.LeaseUntil, want.UpdatedAt = now+100, now+5
	Equal(t, &want, got)
	Equal(t, &want, h.get("t", "m"))
	if tr := h.topic("t"); tr.NextLeaseExpiry != now+100 {
		t.Errorf("NextLeaseExpiry %d after extend", tr.NextLeaseExpiry-now)
	}
	wantIDs(t, "expire at old LeaseUntil", h.expire(now+50, 10))
	h.counts("t", store.Counts{Scheduled: 1, Inflight: 1})
	wantIDs(t, "expire at new LeaseUntil", h.expire(now+100, 10), "m")
	_, err = h.extend("t", "m", l.Receipt, now+100, now+200)
	wantErr(t, "extend after expiry", err, store.ErrConflict)
	_, err = h.extend("t", "s", "", now, now+200)
	wantErr(t, "extend of scheduled", err, store.ErrConflict)
}

func testLeaseExpire(h *harness) {
	t, now := h.t, T0
	h.insertNew("a", now, msg("a1", now), msg("a2", now+1), withMax(msg("c1", now+2), 1))
	h.insertNew("b", now, msg("b1", now), msg("b2", now+1))
	h.promote("a", now+5, 10)
	h.promote("b", now+5, 10)
	a1Lease := h.leaseOne("a", "a1", now+5, now+10)
	h.leaseOne("b", "b1", now+5, now+20)
	h.leaseOne("a", "a2", now+5, now+30)
	h.leaseOne("b", "b2", now+5, now+40)
	c1 := h.leaseOne("a", "c1", now+5, now+15)
	if tr := h.topic("a"); tr.NextLeaseExpiry != now+10 {
		t.Errorf("a NextLeaseExpiry %d", tr.NextLeaseExpiry-now)
	}
	if tr := h.topic("b"); tr.NextLeaseExpiry != now+20 {
		t.Errorf("b NextLeaseExpiry %d", tr.NextLeaseExpiry-now)
	}

	wantIDs(t, "nothing expired yet", h.expire(now+9, 10))
	// Max cuts it short: earliest LeaseUntil first.
	got := h.expire(now+20, 2)
	slices.SortFunc(got, func(x, y *store.Record) int { return strings.Compare(x.ID, y.ID) })
	wantIDs(t, "expire max 2", got, "a1", "c1")
	if len(got) == 2 {
		a1 := got[0]
		if a1.State != store.StateReady || a1.DueAt != now+20 || a1.Failures != 1 || a1.LastError != LeaseExpiredError ||
			a1.Receipt != a1Lease.Receipt || a1.LeaseUntil != 0 || a1.UpdatedAt != now+20 || a1.Deliveries != 1 {
			t.Errorf("expired a1: %s", fmtRec(a1))
		}
		Equal(t, a1, h.get("a", "a1"))
		want := *c1
		want.State, want.Failures, want.LastError, want.DeadAt = store.StateDead, 1, LeaseExpiredError, now+20
		want.LeaseUntil, want.UpdatedAt = 0, now+20
		Equal(t, &want, got[1])
		Equal(t, &want, h.get("a", "c1"))
	}
	h.counts("a", store.Counts{Ready: 1, Inflight: 1, Dead: 1})
	// LeaseUntil == now expires.
	wantIDs(t, "expire boundary", h.expire(now+20, 10), "b1")
	h.counts("b", store.Counts{Ready: 1, Inflight: 1})
	if tr := h.topic("b"); tr.NextLeaseExpiry != now+40 || tr.OldestReady != now+20 {
		t.Errorf("b after expiry: %+v", *tr)
	}
	rest := h.expire(now+1000, 10)
	slices.SortFunc(rest, func(x, y *store.Record) int { return strings.Compare(x.ID, y.ID) })
	wantIDs(t, "expire the rest", rest, "a2", "b2")
	wantIDs(t, "nothing left", h.expire(now+2000, 10))
	h.counts("a", store.Counts{Ready: 2, Dead: 1})
	h.counts("b", store.Counts{Ready: 2})

	// Expiry counts towards MaxAttempts: the third kills a1 (MaxAttempts 3).
	for i := int64(1); i <= 2; i++ {
		at := now + 2000 + 100*i
		h.leaseOne("a", "a1", at, at+1)
		if i == 1 {
			h.lease("a", at, 10, at+1000) // a2 out of the way
		}
		got := h.expire(at+1, 1)
		wantIDs(t, "expire a1", got, "a1")
		if want := map[int64]store.State{1: store.StateReady, 2: store.StateDead}[i]; len(got) == 1 && (got[0].State != want || got[0].Failures != int32(i+1)) {
			t.Errorf("expiry %d of a1: %s", i+1, fmtRec(got[0]))
		}
	}
	if g := h.get("a", "a1"); g.DeadAt != now+2201 {
		t.Errorf("a1 DeadAt %d", g.DeadAt-now)
	}
}
