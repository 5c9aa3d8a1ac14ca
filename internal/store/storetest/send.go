package storetest

import (
	"bytes"
	"maps"
	"math/rand/v2"

	"github.com/delayq/delayq/internal/store"
)

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

// testSenderKeepsBodies: with SenderKeepsBodies a new message's answer
// may leave out its payload and headers, and is otherwise the stored
// record; what is stored is whole; a duplicate (in the same call or a
// later one) is answered with the stored payload and headers.
func testSenderKeepsBodies(h *harness) {
	t, now := h.t, T0
	hdr := map[string]string{"k": "v"}
	first := store.InsertMessage{ID: "a", Payload: []byte("payload of a"), Headers: hdr, DueAt: now + 10, MaxAttempts: 3}
	again := first
	again.Payload, again.Headers = []byte("another payload"), nil
	res, err := h.s.MessageInsertMany(h.ctx, &store.MessageInsertManyParams{Topic: "t", Now: now, SenderKeepsBodies: true,
		Messages: []store.InsertMessage{first, msg("b", now), again}})
	if err != nil || len(res) != 3 {
		t.Fatalf("MessageInsertMany: %d results, %v", len(res), err)
	}
	if res[0].Duplicate || res[1].Duplicate || !res[2].Duplicate {
		t.Fatalf("duplicates %v %v %v: want only the second a", res[0].Duplicate, res[1].Duplicate, res[2].Duplicate)
	}
	for i, id := range []string{"a", "b"} {
		got := h.get("t", id)
		if i == 0 && (string(got.Payload) != "payload of a" || got.Headers["k"] != "v") {
			t.Errorf("stored a: %s", fmtRec(got))
		}
		ans := *res[i].Record
		if ans.Payload != nil && !bytes.Equal(ans.Payload, got.Payload) || ans.Headers != nil && !maps.Equal(ans.Headers, got.Headers) {
			t.Errorf("answer for %s carries a body other than the stored one: %s", id, fmtRec(&ans))
		}
		ans.Payload, ans.Headers = got.Payload, got.Headers
		Equal(t, got, &ans)
	}
	if d := res[2].Record; string(d.Payload) != "payload of a" || d.Headers["k"] != "v" {
		t.Errorf("duplicate in the same call answered %s", fmtRec(d))
	}
	// Changed after the call, the caller's bodies change nothing stored.
	first.Payload[0], hdr["k"] = 'X', "changed"
	if got := h.get("t", "a"); string(got.Payload) != "payload of a" || got.Headers["k"] != "v" {
		t.Errorf("stored a aliases the caller's input: %s", fmtRec(got))
	}
	later, err := h.s.MessageInsertMany(h.ctx, &store.MessageInsertManyParams{Topic: "t", Now: now + 1, SenderKeepsBodies: true,
		Messages: []store.InsertMessage{again}})
	if err != nil || len(later) != 1 || !later[0].Duplicate {
		t.Fatalf("a sent again: %v", err)
	}
	if d := later[0].Record; string(d.Payload) != "payload of a" || d.Headers["k"] != "v" {
		t.Errorf("duplicate in a later call answered %s", fmtRec(d))
	}
	h.counts("t", store.Counts{Scheduled: 1, Ready: 1})
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
