package redisstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"maps"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// encodeFormat2 is the record encoder of format 2, before the receipt
// area: Receipt and LastError unpadded between the fixed header (and
// priority byte) and the headers. Records it makes are what a Redis
// written by those builds holds.
func encodeFormat2(r *store.Record) []byte {
	st := byte(r.State)
	if r.Priority > 0 {
		st |= recPriority
	}
	var t int64
	switch r.State {
	case store.StateInflight:
		t = r.LeaseUntil
	case store.StateDead:
		t = r.DeadAt
	case store.StateAcked:
		t = r.AckedAt
	}
	be := func(b []byte, v uint64, n int) []byte {
		var x [8]byte
		binary.BigEndian.PutUint64(x[:], v)
		return append(b, x[8-n:]...)
	}
	b := []byte{st}
	b = be(b, r.Seq>>ctrBits, 3)
	b = be(b, r.Seq&maxCtr, 6)
	for _, v := range []int64{r.DueAt, r.CreatedAt, r.UpdatedAt, t} {
		b = be(b, uint64(v), 6) // #nosec G115 -- two's complement, as the store writes it
	}
	for _, v := range []int32{r.Deliveries, r.Failures, r.MaxAttempts} {
		b = be(b, uint64(uint32(v)), 4) // #nosec G115 -- two's complement
	}
	if r.Priority > 0 {
		b = append(b, r.Priority)
	}
	h := encodeHeaders(r.Headers)
	b = be(b, uint64(len(r.Receipt)), 2)
	b = append(b, r.Receipt...)
	b = be(b, uint64(len(r.LastError)), 4)
	b = append(b, r.LastError...)
	b = be(b, uint64(len(h)), 4)
	b = append(b, h...)
	return append(b, r.Payload...)
}

// TestFormat2Records: a Redis written by a format-2 build (records
// without the receipt area, in every state, the config saying format 2)
// works with this build without a migration: Open upgrades the config to
// format 3; every record reads back as it was; a promotion, a lease, an
// extension, an ack, a nack, a lease expiry, a dead replay and a resend
// of an acked id each work on those records and answer every payload and
// header exactly; and a record rewritten by one of them is in the area
// layout, so its next lease rewrites only its prefix.
func TestFormat2Records(t *testing.T) {
	onStandaloneAndCluster(t, func(t *testing.T, url string, addrs []string, _ bool) { checkFormat2(t, url, addrs) })
}

func checkFormat2(t *testing.T, url string, addrs []string) {
	ctx := context.Background()
	const topic, now = "old", int64(1_000_000)
	open := func() *Store {
		s, err := Open(ctx, Options{URL: url, Prefix: "f2", TimeSource: TimeCaller, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	nd := newNodes(t, s, addrs)
	msgs := map[string]store.InsertMessage{}
	insert := func(due int64, ids ...string) {
		t.Helper()
		var ms []store.InsertMessage
		for i, id := range ids {
			m := store.InsertMessage{ID: id, DueAt: due, MaxAttempts: 5, Priority: uint8(len(msgs) % 2 * 5),
				Payload: bytes.Repeat([]byte(id+"\x00\xff"), 1000+i)}
			if id != "ix" {
				m.Headers = map[string]string{"k": id, "bin\xff": "\x00"}
			}
			msgs[id] = m
			ms = append(ms, m)
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: ms}); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(at, leaseFor int64, tok string) map[string]*store.Record {
		t.Helper()
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: at, Max: 100, LeaseFor: leaseFor, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*store.Record{}
		for _, r := range recs {
			out[r.ID] = r
		}
		return out
	}
	// The states: ie inflight until now+10; ia, in, ix, d, a inflight
	// until later, then d dead and a acked; s scheduled, r ready.
	insert(now, "ie")
	l1 := lease(now, 10, "aaaaaaaaaaaaaaaa")
	insert(now, "ia", "in", "ix", "d", "a")
	l2 := lease(now, 100_000, "bbbbbbbbbbbbbbbb")
	maps.Copy(l2, l1)
	if len(l2) != 6 {
		t.Fatalf("leased %d; want 6", len(l2))
	}
	if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: topic, ID: "d", Receipt: l2["d"].Receipt, Now: now + 1, Error: "bad \xff input", Final: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: "a", Receipt: l2["a"].Receipt, Now: now + 1}); err != nil {
		t.Fatal(err)
	}
	insert(now+50, "s")
	insert(now, "r")
	// Rewrite every record as a format-2 build stored it, and the config.
	before := map[string]*store.Record{}
	for id := range msgs {
		r, err := s.MessageGet(ctx, topic, id)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = r
		nd.set(topic, id, encodeFormat2(r))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := s.keys.config()
	for _, c := range nd.clients {
		c.HSet(ctx, cfg, "format", prevFormat) // on the node that holds it; the others answer MOVED
	}
	s = open()
	defer s.Close()
	nd.s = s
	for _, c := range nd.clients {
		if f, err := c.HGet(ctx, cfg, "format").Result(); err == nil && f != formatVersion {
			t.Fatalf("config format %q after Open; want %s", f, formatVersion)
		}
	}
	states := map[store.State]int{}
	for id, want := range before {
		if b := nd.record(topic, id); b[0]&recArea != 0 {
			t.Fatalf("%s was not rewritten in the format-2 layout", id)
		}
		got, err := s.MessageGet(ctx, topic, id)
		if err != nil {
			t.Fatal(err)
		}
		if d := storeDiff(want, got); d != "" {
			t.Errorf("%s in the format-2 layout: %s", id, d)
		}
		states[got.State]++
	}
	if len(states) != 5 {
		t.Fatalf("the format-2 records are in states %v; want all five", states)
	}
	// check compares a record with what was sent, and says whether it is
	// now in the area layout.
	check := func(what string, r *store.Record, state store.State) {
		t.Helper()
		m := msgs[r.ID]
		if r.State != state || !bytes.Equal(r.Payload, m.Payload) || !maps.Equal(r.Headers, m.Headers) || r.Priority != m.Priority {
			t.Errorf("%s: %s is %v with a %d-byte payload, headers %v, priority %d; want %v, the %d bytes, %v, %d sent",
				what, r.ID, r.State, len(r.Payload), r.Headers, r.Priority, state, len(m.Payload), m.Headers, m.Priority)
		}
		got, err := s.MessageGet(ctx, topic, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := storeDiff(r, got); d != "" {
			t.Errorf("%s: %s answered and stored differ: %s", what, r.ID, d)
		}
	}
	area := func(id string) bool { return nd.record(topic, id)[0]&recArea != 0 }

	pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: now + 60, Max: 10})
	if err != nil || pr.Promoted != 1 {
		t.Fatalf("promote: %+v, %v; want s promoted", pr, err)
	}
	if area("s") {
		t.Error("the promotion changed s's layout; it rewrites the fixed header only")
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: "ia", Receipt: before["ia"].Receipt, Now: now + 61}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.MessageGet(ctx, topic, "ia"); err != nil || r.State != store.StateAcked || r.Deliveries != 1 || r.Payload != nil {
		t.Errorf("ia after its ack: %+v, %v", r, err)
	}
	ix, err := s.MessageExtend(ctx, &store.MessageExtendParams{Topic: topic, ID: "ix", Receipt: before["ix"].Receipt, Now: now + 61, LeaseFor: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	check("extend", ix, store.StateInflight)
	x, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: topic, ID: "in", Receipt: before["in"].Receipt, Now: now + 61, Error: "retry me"})
	if err != nil {
		t.Fatal(err)
	}
	check("nack", x, store.StateReady)
	exp, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now + 61, Max: 10})
	if err != nil || len(exp) != 1 || exp[0].ID != "ie" {
		t.Fatalf("expire: %d records, %v; want ie", len(exp), err)
	}
	check("expire", exp[0], store.StateReady)
	rp, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: topic, ID: "d", Now: now + 61})
	if err != nil || len(rp) != 1 {
		t.Fatalf("replay: %d records, %v; want d", len(rp), err)
	}
	check("dead replay", rp[0], store.StateReady)
	if rp[0].LastError != before["d"].LastError {
		t.Errorf("d's last error after the replay: %q; want %q", rp[0].LastError, before["d"].LastError)
	}
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now + 61,
		Messages: []store.InsertMessage{{ID: "a", DueAt: now, MaxAttempts: 5, Payload: []byte("again")}}})
	if err != nil || len(res) != 1 || !res[0].Duplicate || res[0].Record.State != store.StateAcked {
		t.Fatalf("resend of the acked a: %+v, %v; want a duplicate of the tombstone", res, err)
	}
	for _, id := range []string{"ix", "in", "ie", "d"} {
		if !area(id) {
			t.Errorf("%s, rewritten whole, is not in the area layout", id)
		}
	}
	// Lease every ready one (s, r, in, ie, d), then ack them all.
	got := lease(now+100, 100_000, "cccccccccccccccc")
	if len(got) != 5 {
		t.Fatalf("leased %d; want s, r, in, ie, d", len(got))
	}
	var items []store.AckItem
	for id, r := range got {
		check("lease", r, store.StateInflight)
		if !area(id) {
			t.Errorf("%s after its lease is not in the area layout", id)
		}
		items = append(items, store.AckItem{ID: id, Receipt: r.Receipt})
	}
	items = append(items, store.AckItem{ID: "ix", Receipt: ix.Receipt})
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Now: now + 101, Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("ack %s: %v", items[i].ID, err)
		}
	}
	for id := range msgs {
		r, err := s.MessageGet(ctx, topic, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != store.StateAcked {
			t.Errorf("%s ends %v; want acked", id, r.State)
		}
	}
}
