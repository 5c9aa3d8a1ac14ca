package storetest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// Run runs the conformance suite. open returns a fresh, empty store for
// each subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	cases := []struct {
		name string
		fn   func(h *harness)
	}{
		{"InsertGet", testInsertGet},
		{"Duplicates", testDuplicates},
		{"DedupPurge", testDedupPurge},
		{"PayloadHeaders", testPayloadHeaders},
		{"Promote", testPromote},
		{"Lease", testLease},
		{"LeaseNeverEarly", testLeaseNeverEarly},
		{"ManyOrdered", testManyOrdered},
		{"Receipts", testReceipts},
		{"Ack", testAck},
		{"AckMany", testAckMany},
		{"Nack", testNack},
		{"Extend", testExtend},
		{"LeaseExpire", testLeaseExpire},
		{"Cancel", testCancel},
		{"Reschedule", testReschedule},
		{"DeadList", testDeadList},
		{"DeadReplay", testDeadReplay},
		{"DeadDelete", testDeadDelete},
		{"Topics", testTopics},
		{"Close", testClose},
		{"ConcurrentLease", testConcurrentLease},
		{"ConcurrentAckExpire", testConcurrentAckExpire},
		{"Schedules", testSchedules},
		{"ScheduleTickRace", testScheduleTickRace},
		{"RateLimiter", testRateLimiter},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fn(newHarness(t, open(t)))
		})
	}
}

func testInsertGet(h *harness) {
	t, now := h.t, T0
	msgs := []store.InsertMessage{
		msg("a", now+100),
		msg("b", now), // due exactly now: ready
		msg("c", now-100),
		withMax(msg("d", now+5), 7),
	}
	recs := h.insertNew("t", now, msgs...)
	for i, r := range recs {
		Equal(t, r, h.get("t", msgs[i].ID))
		if i > 0 && r.Seq <= recs[i-1].Seq {
			t.Errorf("Seq not increasing in batch order: %d then %d", recs[i-1].Seq, r.Seq)
		}
	}
	wantStates := []store.State{store.StateScheduled, store.StateReady, store.StateReady, store.StateScheduled}
	for i, r := range recs {
		if r.State != wantStates[i] {
			t.Errorf("%s: state %v, want %v", r.ID, r.State, wantStates[i])
		}
	}
	later := h.insertNew("t", now+1, msg("e", now-1000))
	if later[0].Seq <= recs[3].Seq {
		t.Errorf("Seq of a later insert %d not above %d", later[0].Seq, recs[3].Seq)
	}
	h.counts("t", store.Counts{Scheduled: 2, Ready: 3})
	tr := h.topic("t")
	if tr.Name != "t" || tr.Settings != nil || tr.NextDue != now+5 || tr.OldestReady != now-1000 || tr.NextLeaseExpiry != 0 {
		t.Errorf("TopicGet: got %+v", *tr)
	}
	_, err := h.s.MessageGet(h.ctx, "t", "nope")
	wantErr(t, "get unknown id", err, store.ErrNotFound)
	_, err = h.s.MessageGet(h.ctx, "nope", "a")
	wantErr(t, "get unknown topic", err, store.ErrNotFound)
	// Same id in another topic is another message.
	h.insertNew("u", now, msg("a", now))
	h.counts("u", store.Counts{Ready: 1})
}

// setupStates makes one message per state in topic "t": s scheduled,
// r ready, i inflight, d dead, k acked. It returns the records as stored.
func setupStates(h *harness, now int64) map[string]*store.Record {
	h.insertNew("t", now, withMax(msg("d", now), 1), msg("k", now))
	h.kill("t", "d", now)
	k := h.leaseOne("t", "k", now, now+100)
	noErr(h.t, "ack k", h.ack("t", "k", k.Receipt, now))
	h.insertNew("t", now, msg("i", now))
	h.leaseOne("t", "i", now, now+100)
	h.insertNew("t", now, msg("s", now+500), msg("r", now-5))
	out := map[string]*store.Record{}
	for _, id := range []string{"s", "r", "i", "d", "k"} {
		out[id] = h.get("t", id)
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Inflight: 1, Dead: 1, Acked: 1})
	return out
}

func testDuplicates(h *harness) {
	t, now := h.t, T0
	before := setupStates(h, now)
	for _, id := range []string{"s", "r", "i", "d", "k"} {
		m := store.InsertMessage{ID: id, Payload: []byte("other"), Headers: map[string]string{"x": "y"}, DueAt: now + 7777, MaxAttempts: 9}
		res := h.insert("t", now+1, m)
		if !res[0].Duplicate {
			t.Errorf("re-send of %s (%v): Duplicate false", id, before[id].State)
		}
		Equal(t, before[id], res[0].Record)
		Equal(t, before[id], h.get("t", id))
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Inflight: 1, Dead: 1, Acked: 1})

	// Within one call, a repeated id is a duplicate of the first.
	res := h.insert("t", now, msg("x", now+10), msg("y", now), store.InsertMessage{ID: "x", Payload: []byte("2nd"), DueAt: now})
	if res[0].Duplicate || res[1].Duplicate || !res[2].Duplicate {
		t.Errorf("batch with repeated id: Duplicate flags %v %v %v, want false false true", res[0].Duplicate, res[1].Duplicate, res[2].Duplicate)
	}
	Equal(t, res[0].Record, res[2].Record)
	Equal(t, fresh("t", msg("x", now+10), res[0].Record.Seq, now), h.get("t", "x"))
	h.counts("t", store.Counts{Scheduled: 2, Ready: 2, Inflight: 1, Dead: 1, Acked: 1})
}

func testDedupPurge(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("a", now), msg("b", now), msg("c", now))
	h.insertNew("u", now, msg("a", now))
	for i, id := range []string{"a", "b", "c"} {
		r := h.leaseOne("t", id, now, now+1000)
		noErr(t, "ack", h.ack("t", id, r.Receipt, now+int64(10*(i+1))))
	}
	r := h.leaseOne("u", "a", now, now+1000)
	noErr(t, "ack", h.ack("u", "a", r.Receipt, now+15))
	// Messages in other states, with old times, are never purged.
	h.insertNew("t", now-5000, msg("s", now+5000), withMax(msg("d", now-5000), 1), msg("r", now-5000), msg("i", now-4000))
	h.promote("t", now, 100)
	h.kill("t", "d", now-5000) // d is first in line (DueAt now-5000)
	h.leaseOne("t", "r", now, now+1)
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Inflight: 1, Dead: 1, Acked: 3})

	purge := func(before int64, max, want int) {
		t.Helper()
		// The store computes the cutoff as Now - Window.
		n, err := h.s.DedupPurge(h.ctx, &store.DedupPurgeParams{Now: before + 3600_000, Window: 3600_000, Max: max})
		noErr(t, "DedupPurge", err)
		if n != want {
			t.Errorf("DedupPurge(before=%d, max=%d): %d, want %d", before-now, max, n, want)
		}
	}
	purge(now+9, 100, 0)
	purge(now+20, 1, 1) // the oldest: t/a (AckedAt +10)
	h.gone("t", "a")
	if got := h.get("t", "b"); got.State != store.StateAcked {
		t.Errorf("t/b purged before t/a: %s", fmtRec(got))
	}
	purge(now+20, 100, 2) // u/a (+15) and t/b (+20, boundary)
	h.gone("u", "a")
	h.gone("t", "b")
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1, Inflight: 1, Dead: 1, Acked: 1})
	h.counts("u", store.Counts{}) // still a known topic
	// A purged id is new again; an acked one still a duplicate.
	again := h.insertNew("t", now+100, msg("a", now+100))
	if c := h.get("t", "c"); again[0].Seq <= c.Seq {
		t.Errorf("re-sent a has Seq %d, not above %d", again[0].Seq, c.Seq)
	}
	if res := h.insert("t", now+100, msg("c", now)); !res[0].Duplicate || res[0].Record.State != store.StateAcked {
		t.Errorf("re-send of acked c: %+v %s", res[0].Duplicate, fmtRec(res[0].Record))
	}
	purge(now+1_000_000, 100, 1)
	h.counts("t", store.Counts{Scheduled: 1, Ready: 2, Inflight: 1, Dead: 1})
}

func testPayloadHeaders(h *harness) {
	t, now := h.t, T0
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	big := make([]byte, 256<<10)
	rng := rand.New(rand.NewPCG(1, 2)) // #nosec G404 -- fixed-seed test data, reproducible on purpose
	for i := range big {
		big[i] = byte(rng.Uint32()) // #nosec G115 -- random test bytes: truncation is the point
	}
	hdr := map[string]string{"content-type": "application/json", "empty": "", "ünï": "cödé\x00"}
	msgs := []store.InsertMessage{
		{ID: "bin", Payload: bin, Headers: hdr, DueAt: now, MaxAttempts: 1},
		{ID: "big", Payload: big, DueAt: now + 10, MaxAttempts: 3},
		{ID: "nilh", Payload: []byte("x"), Headers: nil, DueAt: now, MaxAttempts: 3},
		{ID: "emptyh", Payload: []byte("x"), Headers: map[string]string{}, DueAt: now, MaxAttempts: 3},
		{ID: "emptyp", Payload: []byte{}, DueAt: now, MaxAttempts: 3},
	}
	recs := h.insertNew("t", now, msgs...)
	for i, r := range recs {
		Equal(t, r, h.get("t", msgs[i].ID))
	}
	if g := h.get("t", "emptyh"); len(g.Headers) != 0 {
		t.Errorf("empty headers came back as %v", g.Headers)
	}
	// The store copies what it is given and what it hands out.
	bin[0], big[0] = 0xff, ^big[0]
	hdr["content-type"] = "changed"
	g := h.get("t", "bin")
	g.Payload[1] = 0xee
	g.Headers["new"] = "x"
	g2 := h.get("t", "big")
	g2.Payload[5] = ^g2.Payload[5]
	Equal(t, recs[0], h.get("t", "bin"))
	Equal(t, recs[1], h.get("t", "big"))
	if recs[0].Payload[0] != 0 || recs[0].Headers["content-type"] != "application/json" {
		t.Errorf("returned record aliases the caller's input")
	}

	// Payload and headers survive lease, nack to dead, replay.
	l := h.leaseOne("t", "bin", now, now+10)
	if !bytes.Equal(l.Payload, recs[0].Payload) || len(l.Headers) != 3 || l.Headers["ünï"] != "cödé\x00" {
		t.Errorf("leased record lost payload or headers: %s %v", abbrev(l.Payload), l.Headers)
	}
	d, err := h.nack("t", "bin", l.Receipt, now, now, "x")
	noErr(t, "nack", err)
	if d.State != store.StateDead || !bytes.Equal(d.Payload, recs[0].Payload) || len(d.Headers) != 3 {
		t.Errorf("dead record lost payload or headers: %s", fmtRec(d))
	}
	rep, err := h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: "t", ID: "bin", Now: now})
	noErr(t, "replay", err)
	if len(rep) != 1 || !bytes.Equal(rep[0].Payload, recs[0].Payload) || len(rep[0].Headers) != 3 {
		t.Errorf("replayed record lost payload or headers: %v", rep)
	}
	// An acked tombstone drops both.
	h.promote("t", now+10, 10)
	for _, r := range h.lease("t", now+10, 10, now+100) {
		noErr(t, "ack", h.ack("t", r.ID, r.Receipt, now+10))
		if g := h.get("t", r.ID); len(g.Payload) != 0 || len(g.Headers) != 0 || g.State != store.StateAcked {
			t.Errorf("tombstone keeps payload or headers: %s", fmtRec(g))
		}
	}
	h.counts("t", store.Counts{Acked: 5})
}

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
			msgs = append(msgs, msg("n"+itoa(n), due))
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
	want.Receipt, want.LeaseUntil = "", 0
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
	for _, id := range []string{"a", "c"} {
		if g := h.get("t", id); g.State != store.StateAcked || g.AckedAt != now+1 {
			t.Errorf("%s after AckMany: %s", id, fmtRec(g))
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
		wantErr(t, "AckMany item on unknown topic "+itoa(i), e, store.ErrNotFound)
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
	want.Receipt, want.LeaseUntil, want.UpdatedAt = "", 0, now+1
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
	want.Receipt, want.LeaseUntil, want.UpdatedAt = "", 0, now+125
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
	h.leaseOne("a", "a1", now+5, now+10)
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
	slices.SortFunc(got, func(x, y *store.Record) int { return cmpStr(x.ID, y.ID) })
	wantIDs(t, "expire max 2", got, "a1", "c1")
	if len(got) == 2 {
		a1 := got[0]
		if a1.State != store.StateReady || a1.DueAt != now+20 || a1.Failures != 1 || a1.LastError != LeaseExpiredError ||
			a1.Receipt != "" || a1.LeaseUntil != 0 || a1.UpdatedAt != now+20 || a1.Deliveries != 1 {
			t.Errorf("expired a1: %s", fmtRec(a1))
		}
		Equal(t, a1, h.get("a", "a1"))
		want := *c1
		want.State, want.Failures, want.LastError, want.DeadAt = store.StateDead, 1, LeaseExpiredError, now+20
		want.Receipt, want.LeaseUntil, want.UpdatedAt = "", 0, now+20
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
	slices.SortFunc(rest, func(x, y *store.Record) int { return cmpStr(x.ID, y.ID) })
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

// makeDead kills messages of topic t in the given order at the given
// times; ids are inserted in alphabetical order so that ties in DeadAt
// must be broken by Seq, not by time of death.
func makeDead(h *harness, topic string, deaths []death) {
	var msgs []store.InsertMessage
	sorted := slices.Clone(deaths)
	slices.SortFunc(sorted, func(a, b death) int { return cmpStr(a.id, b.id) })
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
		wantIDs(t, "DeadList limit "+itoa(limit), all, order...)
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

func testTopics(h *harness) {
	t, now := h.t, T0
	list, err := h.s.TopicList(h.ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("TopicList of empty store: %v %v", list, err)
	}
	_, err = h.s.TopicGet(h.ctx, "b")
	wantErr(t, "TopicGet unknown", err, store.ErrNotFound)

	settings := []byte("{\"max_attempts\":5}\x00\xff")
	noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, "b", settings))
	settings[0] = 'X' // the store keeps its own copy
	tr := h.topic("b")
	if string(tr.Settings) != "{\"max_attempts\":5}\x00\xff" || tr.Counts != (store.Counts{}) || tr.Name != "b" ||
		tr.NextDue != 0 || tr.OldestReady != 0 || tr.NextLeaseExpiry != 0 {
		t.Errorf("settings-only topic: %+v", *tr)
	}
	tr.Settings[1] = 'Y'
	if got := h.topic("b"); got.Settings[1] != '"' {
		t.Errorf("TopicGet hands out the stored settings: %q", got.Settings)
	}
	noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, "b", []byte("v2")))
	if got := h.topic("b"); string(got.Settings) != "v2" {
		t.Errorf("overwritten settings: %q", got.Settings)
	}

	h.insertNew("c:x", now, msg("1", now), msg("2", now+10))
	h.insertNew("A-z.9", now, msg("1", now))
	h.insertNew("a", now, msg("1", now+10))
	if _, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "a", ID: "1", Now: now}); err != nil {
		t.Fatal(err)
	}
	list, err = h.s.TopicList(h.ctx)
	noErr(t, "TopicList", err)
	var names []string
	for _, tr := range list {
		names = append(names, tr.Name)
		want := h.topic(tr.Name)
		if tr.Counts != want.Counts || string(tr.Settings) != string(want.Settings) || tr.NextDue != want.NextDue ||
			tr.OldestReady != want.OldestReady || tr.NextLeaseExpiry != want.NextLeaseExpiry {
			t.Errorf("TopicList entry %+v differs from TopicGet %+v", *tr, *want)
		}
	}
	if want := []string{"A-z.9", "a", "b", "c:x"}; !slices.Equal(names, want) {
		t.Errorf("TopicList names %v, want %v", names, want)
	}
	if tr := h.topic("c:x"); tr.Settings != nil || tr.Counts != (store.Counts{Scheduled: 1, Ready: 1}) || tr.NextDue != now+10 || tr.OldestReady != now {
		t.Errorf("topic c:x: %+v", *tr)
	}
	h.counts("a", store.Counts{}) // known, though empty
}

func testClose(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("a", now))
	noErr(t, "Close", h.s.Close())
	ctx := h.ctx
	calls := map[string]func() error{
		"MessageInsertMany": func() error {
			_, err := h.s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now, Messages: []store.InsertMessage{msg("b", now)}})
			return err
		},
		"MessageGet": func() error { _, err := h.s.MessageGet(ctx, "t", "a"); return err },
		"MessageCancel": func() error {
			_, err := h.s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "t", ID: "a", Now: now})
			return err
		},
		"MessageReschedule": func() error {
			_, err := h.s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "t", ID: "a", DueAt: now, Now: now})
			return err
		},
		"MessagePromote": func() error {
			_, err := h.s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: now, Max: 1})
			return err
		},
		"MessageLease": func() error {
			_, err := h.s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: now, Max: 1, LeaseFor: 1, Token: "x"})
			return err
		},
		"MessageAck": func() error {
			return h.s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "a", Receipt: "r", Now: now})
		},
		"MessageAckMany": func() error {
			_, err := h.s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "t", Items: []store.AckItem{{ID: "a", Receipt: "r"}}, Now: now})
			return err
		},
		"MessageNack": func() error {
			_, err := h.s.MessageNack(ctx, &store.MessageNackParams{Topic: "t", ID: "a", Receipt: "r", Now: now})
			return err
		},
		"MessageExtend": func() error {
			_, err := h.s.MessageExtend(ctx, &store.MessageExtendParams{Topic: "t", ID: "a", Receipt: "r", Now: now})
			return err
		},
		"LeaseExpire": func() error { _, err := h.s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: 1}); return err },
		"DeadList": func() error {
			_, _, err := h.s.DeadList(ctx, &store.DeadListParams{Topic: "t", Limit: 1})
			return err
		},
		"DeadReplay": func() error {
			_, err := h.s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "t", Now: now, Max: 1})
			return err
		},
		"DeadDelete": func() error {
			_, err := h.s.DeadDelete(ctx, &store.DeadDeleteParams{Topic: "t", Max: 1})
			return err
		},
		"DedupPurge": func() error {
			_, err := h.s.DedupPurge(ctx, &store.DedupPurgeParams{Now: now, Max: 1})
			return err
		},
		"TopicGet":         func() error { _, err := h.s.TopicGet(ctx, "t"); return err },
		"TopicList":        func() error { _, err := h.s.TopicList(ctx); return err },
		"TopicSettingsPut": func() error { return h.s.TopicSettingsPut(ctx, "t", []byte("x")) },
		"ScheduleUpsert": func() error {
			_, err := h.s.ScheduleUpsert(ctx, &store.ScheduleUpsertParams{Name: "s", Spec: []byte("x"), Now: now})
			return err
		},
		"ScheduleGet":    func() error { _, err := h.s.ScheduleGet(ctx, "s"); return err },
		"ScheduleList":   func() error { _, err := h.s.ScheduleList(ctx); return err },
		"ScheduleDelete": func() error { return h.s.ScheduleDelete(ctx, "s") },
		"ScheduleTick": func() error {
			_, err := h.s.ScheduleTick(ctx, &store.ScheduleTickParams{Name: "s", Tick: now})
			return err
		},
	}
	for name, call := range calls {
		wantErr(t, name+" after Close", call(), store.ErrClosed)
	}
	if err := h.s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
