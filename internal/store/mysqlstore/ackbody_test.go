package mysqlstore_test

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestAckReadsNoPayload: an ack reads what its tombstone keeps, not the
// messages' payloads (it read every field, so a batch ack of 100 messages
// of 1 KiB carried 100 KiB from the database only to drop it). The
// lease's read is counted too, so that a counter that counts nothing
// fails the test.
func TestAckReadsNoPayload(t *testing.T) {
	var read atomic.Int64
	mysqlstore.CountReadBytes(t, &read)
	s := open(t, mysqlstore.TimeDB)
	const n, size = 10, 64 << 10
	payload := bytes.Repeat([]byte("p"), size)
	msgs := make([]store.InsertMessage, n)
	for i := range msgs {
		msgs[i] = store.InsertMessage{ID: fmt.Sprintf("m%d", i), Payload: payload, Relative: true, MaxAttempts: 3}
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "ab", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	r0 := read.Load()
	leased, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "ab", Max: n, LeaseFor: 60_000, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if len(leased) != n {
		t.Fatalf("leased %d, want %d", len(leased), n)
	}
	leaseRead := read.Load() - r0
	if leaseRead < n*size {
		t.Fatalf("the lease read %d bytes for %d payloads of %d: the counter does not count", leaseRead, n, size)
	}
	items := make([]store.AckItem, n)
	for i, r := range leased {
		if len(r.Payload) != size {
			t.Fatalf("%s leased with a payload of %d bytes, want %d", r.ID, len(r.Payload), size)
		}
		items[i] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
	}
	r0 = read.Load()
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "ab", Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("ack of %s: %v", items[i].ID, err)
		}
	}
	if got := read.Load() - r0; got >= size {
		t.Errorf("the ack of %d messages read %d bytes from the database, want less than one payload (%d)", n, got, size)
	}
	for _, it := range items {
		if r, err := s.MessageGet(ctx, "ab", it.ID); err != nil || r.State != store.StateAcked {
			t.Errorf("%s after the ack: %v, %v; want acked", it.ID, r, err)
		}
	}
}
