package redisstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestTombstoneKeepsReceipt: an ack leaves a tombstone holding the
// receipt that acked it and nothing else new — the fixed header, the
// receipt and the last error, no area, headers or payload, whatever the
// message's size — so a tombstone costs only the receipt's bytes more
// than before; a second ack with that receipt is still a conflict; and a
// tombstone as earlier builds wrote it (the same layout, an empty
// receipt) reads back with an empty receipt and is still a duplicate for
// a resend of its id.
func TestTombstoneKeepsReceipt(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	const topic, now = "tomb", int64(1_000_000)
	s, err := Open(ctx, Options{URL: srv.URL(), Prefix: "tomb", TimeSource: TimeCaller, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nd := newNodes(t, s, []string{srv.Addr()})
	ids := []string{"small", "large", "old"}
	var msgs []store.InsertMessage
	for _, id := range ids {
		m := store.InsertMessage{ID: id, DueAt: now, MaxAttempts: 5, Priority: 3,
			Payload: []byte("x"), Headers: map[string]string{"k": "v"}}
		if id != "small" {
			m.Payload = bytes.Repeat([]byte("p"), 2048) // a record with a receipt area
		}
		msgs = append(msgs, m)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: 10, LeaseFor: 1000, Token: "0123456789abcdef"})
	if err != nil || len(recs) != len(ids) {
		t.Fatalf("lease: %d records, %v", len(recs), err)
	}
	leased := map[string]*store.Record{}
	var items []store.AckItem
	for _, r := range recs {
		leased[r.ID] = r
		items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
	}
	if errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Now: now + 1, Items: items}); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("ack: %v %v", errs, err)
	}
	for _, id := range ids {
		l := leased[id]
		got, err := s.MessageGet(ctx, topic, id)
		if err != nil {
			t.Fatal(err)
		}
		want := *l
		want.State, want.Payload, want.Headers, want.LeaseUntil, want.AckedAt, want.UpdatedAt = store.StateAcked, nil, nil, 0, now+1, now+1
		if d := storeDiff(&want, got); d != "" {
			t.Errorf("%s after its ack: %s", id, d)
		}
		b := nd.record(topic, id)
		if b[0]&recArea != 0 {
			t.Errorf("%s's tombstone has a receipt area", id)
		}
		// The header, the priority byte, the receipt and an empty last
		// error and headers: what encodeFormat2, the layout tombstones have
		// always had, makes of it.
		if size := recHeader + 1 + 2 + len(l.Receipt) + 4 + 4; len(b) != size || !bytes.Equal(b, encodeFormat2(got)) {
			t.Errorf("%s's tombstone is %d bytes %q; want the %d of %q", id, len(b), b, size, encodeFormat2(got))
		}
		if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: id, Receipt: l.Receipt, Now: now + 2}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("second ack of %s with its receipt: %v; want ErrConflict", id, err)
		}
	}

	// A tombstone an earlier build wrote: no receipt.
	old, err := s.MessageGet(ctx, topic, "old")
	if err != nil {
		t.Fatal(err)
	}
	old.Receipt = ""
	nd.set(topic, "old", encodeFormat2(old))
	got, err := s.MessageGet(ctx, topic, "old")
	if err != nil {
		t.Fatal(err)
	}
	if d := storeDiff(old, got); d != "" || got.Receipt != "" {
		t.Errorf("a tombstone without a receipt: %s", d)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: "old", Receipt: leased["old"].Receipt, Now: now + 2}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ack of a tombstone without a receipt: %v; want ErrConflict", err)
	}
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now + 2,
		Messages: []store.InsertMessage{{ID: "old", DueAt: now, MaxAttempts: 5}}})
	if err != nil || len(res) != 1 || !res[0].Duplicate || storeDiff(old, res[0].Record) != "" {
		t.Fatalf("resend of old: %+v, %v; want a duplicate of its tombstone", res, err)
	}
}
