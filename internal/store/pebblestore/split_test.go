package pebblestore

import (
	"bytes"
	"maps"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// countKeys counts the keys with prefix p.
func countKeys(t *testing.T, s *Store, p string) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(p), UpperBound: prefixEnd([]byte(p))})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// isSplit says whether topic/id is stored as a version-3 state record.
func isSplit(t *testing.T, s *Store, topic, id string) bool {
	t.Helper()
	v, err := s.get(messageKey(topic, id))
	if err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	_, split, err := decodeRecord(v, topic, id)
	if err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	return split
}

// A format-2 directory (combined records) holding messages in every state
// (scheduled, promoted, ready, another priority, inflight with a receipt,
// inflight to expire, dead, acked) opens in the current format; every message reads
// back with its payload and headers exactly; the old receipt acks; lease
// expiry, replay, leases, nacks, a reschedule and acks work on it, writing
// the split layout; and every payload comes back exactly after that too.
func TestUpgradeFormat2Split(t *testing.T) {
	fs := vfs.NewMem()
	writeCombined = true
	t.Cleanup(func() { writeCombined = false })
	s := openMem(t, fs)

	sent := map[string]store.InsertMessage{}
	send := func(now int64, ms ...store.InsertMessage) {
		for i := range ms {
			ms[i].Payload = append(bytes.Repeat([]byte{byte(i + 1)}, 700), ms[i].ID...)
			ms[i].Headers = map[string]string{"trace": "t-" + ms[i].ID, "k": "v"}
			sent[ms[i].ID] = ms[i]
		}
		insert(t, s, "q", now, ms...)
	}
	prio := func(id string, due int64, p uint8) store.InsertMessage {
		x := m(id, due)
		x.Priority = p
		return x
	}
	send(1, m("dead", 0), m("acked", 0), m("infl", 0))
	ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 1, Max: 3, LeaseFor: 1_000_000, Token: "old"})
	if err != nil || len(ls) != 3 {
		t.Fatalf("lease: %d %v", len(ls), err)
	}
	receipt := map[string]string{}
	for _, r := range ls {
		receipt[r.ID] = r.Receipt
	}
	send(2, m("exp", 0))
	if ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 2, Max: 1, LeaseFor: 10, Token: "old2"}); err != nil || len(ls) != 1 || ls[0].ID != "exp" {
		t.Fatalf("lease exp: %v %v", ls, err)
	}
	if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "q", ID: "dead", Receipt: receipt["dead"], Now: 3, Final: true, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "acked", Receipt: receipt["acked"], Now: 3}); err != nil {
		t.Fatal(err)
	}
	send(4, m("sched", 10_000), m("ready", 0), m("promoted", 50), prio("prio", 0, 5), prio("psched", 20_000, 7))
	if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 100, Max: 10}); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, s, "b/"); n != 0 {
		t.Fatalf("%d bodies in a store written with combined records", n)
	}
	mustVerify(t, s)
	addLeaseIndex(t, s) // as format 2 kept it
	setFormat(t, s, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	writeCombined = false

	s = openMem(t, fs)
	defer s.Close()
	if got := storedFormat(t, s); got != formatVersion {
		t.Fatalf("format after open: %d, want %d", got, formatVersion)
	}
	mustVerify(t, s)
	checked := map[string]bool{}
	check := func(r *store.Record) {
		t.Helper()
		want := sent[r.ID]
		if !bytes.Equal(r.Payload, want.Payload) || !maps.Equal(r.Headers, want.Headers) || r.Priority != want.Priority {
			t.Fatalf("%s: payload %q headers %v priority %d; want %q %v %d", r.ID, r.Payload, r.Headers, r.Priority, want.Payload, want.Headers, want.Priority)
		}
		checked[r.ID] = true
	}
	wantState := map[string]store.State{"dead": store.StateDead, "acked": store.StateAcked, "infl": store.StateInflight,
		"exp": store.StateInflight, "sched": store.StateScheduled, "ready": store.StateReady, "promoted": store.StateReady,
		"prio": store.StateReady, "psched": store.StateScheduled}
	for id, st := range wantState {
		r, err := s.MessageGet(ctx, "q", id)
		if err != nil || r.State != st {
			t.Fatalf("MessageGet %s: %+v %v; want state %s", id, r, err, st)
		}
		if st == store.StateAcked {
			if r.Payload != nil || r.Headers != nil {
				t.Fatalf("acked %s has a body: %+v", id, r)
			}
			continue
		}
		check(r)
	}

	// The receipt of a lease taken before the upgrade still acks.
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "infl", Receipt: receipt["infl"], Now: 500}); err != nil {
		t.Fatalf("ack with a pre-upgrade receipt: %v", err)
	}
	exp, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 1000, Max: 10})
	if err != nil || len(exp) != 1 || exp[0].ID != "exp" {
		t.Fatalf("LeaseExpire: %v %v", exp, err)
	}
	check(exp[0])
	rep, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "q", ID: "dead", Now: 1000, Max: 1})
	if err != nil || len(rep) != 1 {
		t.Fatalf("DeadReplay: %v %v", rep, err)
	}
	check(rep[0])
	if _, err := s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "q", ID: "sched", Now: 1000, DueAt: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"exp", "dead", "sched"} {
		if !isSplit(t, s, "q", id) {
			t.Fatalf("%s is still combined after a state change", id)
		}
	}
	mustVerify(t, s)

	leaseAll := func(now int64, want ...string) map[string]*store.Record {
		t.Helper()
		ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: now, Max: 100, LeaseFor: 100, Token: "new"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*store.Record{}
		for _, r := range ls {
			check(r)
			got[r.ID] = r
		}
		if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, want) {
			t.Fatalf("lease at %d: %v, want %v", now, ids, want)
		}
		return got
	}
	l1 := leaseAll(1000, "dead", "exp", "prio", "promoted", "ready", "sched")
	for _, id := range []string{"prio", "promoted", "ready"} {
		if !isSplit(t, s, "q", id) {
			t.Fatalf("%s is still combined after its lease", id)
		}
	}
	// Nacks of split records: back to ready, and to scheduled.
	if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "q", ID: "ready", Receipt: l1["ready"].Receipt, Now: 1001}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "q", ID: "promoted", Receipt: l1["promoted"].Receipt, Now: 1001, RetryDelay: 5000}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"dead", "exp", "prio", "sched"} {
		if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: id, Receipt: l1[id].Receipt, Now: 1002}); err != nil {
			t.Fatalf("ack %s: %v", id, err)
		}
	}
	mustVerify(t, s)
	l2 := leaseAll(2000, "ready")
	if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 30_000, Max: 10}); err != nil {
		t.Fatal(err)
	}
	l3 := leaseAll(30_000, "promoted", "psched")
	var items []store.AckItem
	for _, l := range []map[string]*store.Record{l2, l3} {
		for id, r := range l {
			items = append(items, store.AckItem{ID: id, Receipt: r.Receipt})
		}
	}
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "q", Items: items, Now: 30_001})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("ack %s: %v", items[i].ID, e)
		}
	}
	for id, st := range wantState {
		if st != store.StateAcked && !checked[id] {
			t.Errorf("%s: payload never checked", id)
		}
	}
	mustVerify(t, s)
	if n := countKeys(t, s, "b/"); n != 0 {
		t.Fatalf("%d bodies left with every message acked", n)
	}
	if n, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Now: 1 << 40, Window: 1, Max: 100}); err != nil || n != len(wantState) {
		t.Fatalf("DedupPurge: %d %v, want %d", n, err, len(wantState))
	}
	if n := countKeys(t, s, "m/"); n != 0 {
		t.Fatalf("%d records left after the purge", n)
	}
	mustVerify(t, s)
}

// walBytes is what the store has logged to its WAL so far.
func walBytes(s *Store) uint64 { return s.db.Metrics().WAL.BytesIn }

// State changes write the small state record, never the payload: with a
// 64 KiB payload, the lease, extend, nack, expiry, dead-letter replay and
// ack of a message each log under 1 KiB, while its send logs the payload
// once. Cancel deletes the body with the record.
func TestStateChangesDoNotWritePayload(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	big := m("a", 0)
	big.Payload = bytes.Repeat([]byte("x"), 64<<10)
	big.MaxAttempts = 5
	w0 := walBytes(s)
	insert(t, s, "q", 1, big)
	if n := walBytes(s) - w0; n < 64<<10 || n > 66<<10 {
		t.Fatalf("the send logged %d bytes, want the 64 KiB payload once", n)
	}
	step := func(what string, op func() error) {
		t.Helper()
		w := walBytes(s)
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := walBytes(s) - w; n == 0 || n > 1024 {
			t.Fatalf("%s logged %d bytes, want a state record (0 < n <= 1024)", what, n)
		}
	}
	var r *store.Record
	lease := func(now int64) func() error {
		return func() error {
			ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: now, Max: 1, LeaseFor: 10, Token: "t"})
			if err == nil && (len(ls) != 1 || !bytes.Equal(ls[0].Payload, big.Payload)) {
				t.Fatalf("lease at %d: %d records", now, len(ls))
			}
			if err == nil {
				r = ls[0]
			}
			return err
		}
	}
	step("lease", lease(2))
	step("extend", func() error {
		_, err := s.MessageExtend(ctx, &store.MessageExtendParams{Topic: "q", ID: "a", Receipt: r.Receipt, Now: 3, LeaseFor: 10})
		return err
	})
	step("nack", func() error {
		_, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "q", ID: "a", Receipt: r.Receipt, Now: 4})
		return err
	})
	step("lease again", lease(5))
	step("lease expiry", func() error {
		ex, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 100, Max: 10})
		if err == nil && len(ex) != 1 {
			t.Fatalf("expired %d", len(ex))
		}
		return err
	})
	step("lease to nack dead", lease(101))
	step("nack to dead", func() error {
		_, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "q", ID: "a", Receipt: r.Receipt, Now: 102, Final: true})
		return err
	})
	step("dead replay", func() error {
		_, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "q", ID: "a", Now: 103, Max: 1})
		return err
	})
	step("lease to ack", lease(104))
	step("ack", func() error {
		return s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "a", Receipt: r.Receipt, Now: 105})
	})
	if n := countKeys(t, s, "b/"); n != 0 {
		t.Fatalf("the ack left %d bodies", n)
	}
	insert(t, s, "q", 200, m("c", 0))
	if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "q", ID: "c", Now: 201}); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, s, "b/"); n != 0 {
		t.Fatalf("the cancel left %d bodies", n)
	}
	mustVerify(t, s)
}
