package storetest

import (
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/delayq/delayq/internal/store"
)

func testPromote(h *harness) {
	t, now := h.t, T0
	// Out of due order, with ties: expected (DueAt, Seq) order m1 m3 m5 m6 m4 m2 m0.
	dues := []int64{50, 10, 30, 10, 20, 10}
	var msgs []store.InsertMessage
	for i, d := range dues {
		msgs = append(msgs, msg("m"+string(rune('0'+i)), now+d))
	}
	h.insertNew("t", now, msgs...)
	h.insertNew("t", now+1, msg("m6", now+10))
	h.insertNew("other", now, msg("o", now+1))
	h.counts("t", store.Counts{Scheduled: 7})
	if tr := h.topic("t"); tr.NextDue != now+10 || tr.OldestReady != 0 {
		t.Errorf("TopicGet: NextDue %d OldestReady %d", tr.NextDue-now, tr.OldestReady)
	}

	h.wantPromote("t", now+9, 100, 0, now+10)
	// Max cuts the call short: NextDue may be <= now.
	h.wantPromote("t", now+10, 2, 2, now+10)
	for id, st := range map[string]store.State{"m1": store.StateReady, "m3": store.StateReady, "m5": store.StateScheduled, "m6": store.StateScheduled} {
		if g := h.get("t", id); g.State != st {
			t.Errorf("after promote max 2: %s is %v, want %v", id, g.State, st)
		}
	}
	if g := h.get("t", "m1"); g.UpdatedAt != now+10 || g.DueAt != now+10 {
		t.Errorf("promoted record: %s", fmtRec(g))
	}
	h.counts("t", store.Counts{Scheduled: 5, Ready: 2})
	h.wantPromote("t", now+10, 100, 2, now+20)
	h.wantPromote("t", now+25, 100, 1, now+30)
	h.counts("t", store.Counts{Scheduled: 2, Ready: 5})
	if tr := h.topic("t"); tr.NextDue != now+30 || tr.OldestReady != now+10 {
		t.Errorf("TopicGet: NextDue %d OldestReady %d", tr.NextDue-now, tr.OldestReady-now)
	}
	wantIDs(t, "lease after promotes", h.lease("t", now+100, 100, now+200), "m1", "m3", "m5", "m6", "m4")
	h.wantPromote("t", now+100, 100, 2, 0)
	wantIDs(t, "lease after last promote", h.lease("t", now+100, 100, now+200), "m2", "m0")
	h.wantPromote("t", now+100, 100, 0, 0)
	h.counts("other", store.Counts{Scheduled: 1}) // untouched

	// Unknown topic: nothing, and the topic is not created.
	h.wantPromote("nope", now, 10, 0, 0)
	_, err := h.s.TopicGet(h.ctx, "nope")
	wantErr(t, "TopicGet after promote of unknown topic", err, store.ErrNotFound)
}

func testLease(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("a", now-5), msg("b", now-50), msg("c", now-5), msg("d", now-20), msg("e", now-50), msg("s", now+10))
	h.insertNew("other", now, msg("o", now))
	h.counts("t", store.Counts{Scheduled: 1, Ready: 5})
	first := h.lease("t", now, 2, now+30)
	wantIDs(t, "lease max 2", first, "b", "e")
	for _, r := range first {
		want := h.get("t", r.ID)
		Equal(t, want, r)
		if r.Deliveries != 1 || r.Failures != 0 {
			t.Errorf("leased %s: Deliveries %d Failures %d", r.ID, r.Deliveries, r.Failures)
		}
	}
	if tr := h.topic("t"); tr.OldestReady != now-20 || tr.NextLeaseExpiry != now+30 || tr.NextDue != now+10 {
		t.Errorf("TopicGet: %+v", *tr)
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 3, Inflight: 2})
	// Only ready messages: s is due at now+20 but was never promoted.
	wantIDs(t, "lease rest", h.lease("t", now+20, 10, now+25), "d", "a", "c")
	wantIDs(t, "lease with nothing ready", h.lease("t", now+20, 10, now+25))
	h.counts("t", store.Counts{Scheduled: 1, Inflight: 5})
	if tr := h.topic("t"); tr.OldestReady != 0 || tr.NextLeaseExpiry != now+25 {
		t.Errorf("TopicGet: %+v", *tr)
	}
	h.counts("other", store.Counts{Ready: 1})
	recs, err := h.s.MessageLease(h.ctx, &store.MessageLeaseParams{Topic: "nope", Now: now, Max: 5, LeaseFor: 1, Token: h.token()})
	if err != nil || len(recs) != 0 {
		t.Errorf("lease of unknown topic: %v, %v", recs, err)
	}
	_, err = h.s.TopicGet(h.ctx, "nope")
	wantErr(t, "TopicGet after lease of unknown topic", err, store.ErrNotFound)
}

// testLeaseNeverEarly: a lease whose Now is earlier than a ready message's
// DueAt (a promotion with a later clock reading raced it) must not take it,
// nor anything after it in order.
func testLeaseNeverEarly(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("a", now+5), msg("b", now+10))
	h.wantPromote("t", now+10, 10, 2, 0)
	wantIDs(t, "lease before any is due", h.lease("t", now+4, 10, now+100))
	wantIDs(t, "lease when a is due", h.lease("t", now+5, 10, now+100), "a")
	h.counts("t", store.Counts{Ready: 1, Inflight: 1})
	wantIDs(t, "lease when b is due", h.lease("t", now+10, 10, now+100), "b")
}

// testManyOrdered checks (DueAt, Seq) order on many messages whose dues
// span many magnitudes (catching key encodings that do not sort), reached
// both straight at insert and through promote.
func testManyOrdered(h *harness) {
	t, now := h.t, T0
	rng := rand.New(rand.NewPCG(7, 11)) // #nosec G404 -- fixed-seed test data, reproducible on purpose
	type key struct {
		due int64
		seq uint64
		id  string
	}
	var all []key
	n := 0
	for batch := range 20 {
		var msgs []store.InsertMessage
		for range 100 {
			var due int64
			switch rng.IntN(4) {
			case 0:
				due = now - rng.Int64N(1<<uint(rng.IntN(40)))
			case 1:
				due = now + rng.Int64N(1<<uint(rng.IntN(45)))
			case 2:
				due = now + int64(rng.IntN(5)) // many ties
			default:
				due = now + rng.Int64N(1<<20)
			}
			msgs = append(msgs, msg("n"+strconv.Itoa(n), due))
			n++
		}
		for i, r := range h.insertNew("t", now+int64(batch), msgs...) {
			all = append(all, key{msgs[i].DueAt, r.Seq, r.ID})
		}
	}
	slices.SortFunc(all, func(a, b key) int {
		if a.due != b.due {
			if a.due < b.due {
				return -1
			}
			return 1
		}
		if a.seq < b.seq {
			return -1
		}
		return 1
	})
	end := now + 1<<46
	for {
		if r := h.promote("t", end, 97); r.Promoted == 0 {
			break
		}
	}
	var got []string
	for {
		recs := h.lease("t", end, 89, end+1)
		if len(recs) == 0 {
			break
		}
		got = append(got, ids(recs)...)
	}
	want := make([]string, len(all))
	for i, k := range all {
		want[i] = k.id
	}
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("lease order differs at %d of %d: got %s, want %s (%d leased)", i, len(want), got[i], want[i], len(got))
			}
		}
		t.Fatalf("leased %d messages, want %d", len(got), len(want))
	}
	h.counts("t", store.Counts{Inflight: int64(n)})
}

func testReceipts(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, withMax(msg("m", now), 10))
	seen := map[string]bool{}
	var r *store.Record
	for round := int32(1); round <= 5; round++ {
		r = h.leaseOne("t", "m", now, now+10)
		if r.Deliveries != round || seen[r.Receipt] {
			t.Errorf("delivery %d: Deliveries %d, receipt %q (seen before: %v)", round, r.Deliveries, r.Receipt, seen[r.Receipt])
		}
		seen[r.Receipt] = true
		if round < 5 {
			wantIDs(t, "expire", h.expire(now+10, 10), "m")
			now += 10
		}
	}
	// Every earlier receipt is stale; nothing changes when one is used.
	cur := h.get("t", "m")
	for old := range seen {
		if old == r.Receipt {
			continue
		}
		wantErr(t, "ack with stale receipt", h.ack("t", "m", old, now), store.ErrConflict)
		_, err := h.nack("t", "m", old, now, now, "x")
		wantErr(t, "nack with stale receipt", err, store.ErrConflict)
		_, err = h.extend("t", "m", old, now, now+99)
		wantErr(t, "extend with stale receipt", err, store.ErrConflict)
	}
	wantErr(t, "ack with bogus receipt", h.ack("t", "m", "bogus", now), store.ErrConflict)
	Equal(t, cur, h.get("t", "m"))

	// A nack makes the receipt stale too.
	_, err := h.nack("t", "m", r.Receipt, now, now, "x")
	noErr(t, "nack", err)
	r2 := h.leaseOne("t", "m", now, now+10)
	if seen[r2.Receipt] {
		t.Errorf("receipt %q repeated", r2.Receipt)
	}
	wantErr(t, "ack with receipt from before the nack", h.ack("t", "m", r.Receipt, now), store.ErrConflict)
	// The store checks the receipt, not the clock: the lease ran out at
	// now+10 but was not expired yet, so it is still current.
	_, err = h.extend("t", "m", r2.Receipt, now+20, now+30)
	noErr(t, "extend after LeaseUntil", err)
	noErr(t, "ack after LeaseUntil", h.ack("t", "m", r2.Receipt, now+40))
	h.counts("t", store.Counts{Acked: 1})

	// A message cancelled and sent again is a new message: the old
	// instance's receipt must not work on it.
	h.insertNew("t", now, msg("n", now))
	rn := h.leaseOne("t", "n", now, now+10)
	_, err = h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "t", ID: "n", Now: now})
	noErr(t, "cancel", err)
	h.insertNew("t", now, msg("n", now))
	rn2 := h.leaseOne("t", "n", now, now+10)
	if rn2.Receipt == rn.Receipt {
		t.Errorf("re-sent message got its old instance's receipt %q", rn.Receipt)
	}
	wantErr(t, "ack with the cancelled instance's receipt", h.ack("t", "n", rn.Receipt, now), store.ErrConflict)

	// Unknown message or topic: ErrNotFound.
	wantErr(t, "ack unknown id", h.ack("t", "zz", "r", now), store.ErrNotFound)
	wantErr(t, "ack unknown topic", h.ack("zz", "m", "r", now), store.ErrNotFound)
	_, err = h.nack("t", "zz", "r", now, now, "x")
	wantErr(t, "nack unknown id", err, store.ErrNotFound)
	_, err = h.nack("zz", "m", "r", now, now, "x")
	wantErr(t, "nack unknown topic", err, store.ErrNotFound)
	_, err = h.extend("t", "zz", "r", now, now)
	wantErr(t, "extend unknown id", err, store.ErrNotFound)
	_, err = h.extend("zz", "m", "r", now, now)
	wantErr(t, "extend unknown topic", err, store.ErrNotFound)
}
