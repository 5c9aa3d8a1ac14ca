package pebblestore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestSizedBatchesFit: the batches of inserts, leases and acks are
// started at their estimated size, and what they write fits in it (a
// batch that outgrows its start is copied at every doubling, which the
// estimate is there to avoid). Ids (up to typicalIDLen), a long topic,
// payloads and headers of several sizes; every message leased and acked
// in batches.
func TestSizedBatchesFit(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	var checked int
	sizedHook = func(sized, length int) {
		checked++
		if length > sized {
			t.Errorf("batch of %d bytes, started at %d", length, sized)
		}
	}
	defer func() { sizedHook = nil }()
	topic := strings.Repeat("t", 200)
	n := 0
	for _, payload := range []int{0, 10, 1024, 64 << 10} {
		for _, idLen := range []int{1, 26, typicalIDLen} {
			ms := make([]store.InsertMessage, 50)
			for i := range ms {
				id := fmt.Sprintf("%0*d", idLen, n)
				n++
				ms[i] = store.InsertMessage{ID: id, Payload: make([]byte, payload), MaxAttempts: 3, Priority: uint8(i % 2)}
				if i%3 == 0 {
					ms[i].Headers = map[string]string{"k": strings.Repeat("v", 300), "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
				}
				if i%5 == 0 {
					ms[i].DueAt = 2 // scheduled, then due by the lease's Now
				}
			}
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 1, Messages: ms}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		recs, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: topic, Now: 10, Max: 100, LeaseFor: 1e6, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		items := make([]store.AckItem, len(recs))
		for i, r := range recs {
			items[i] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
		}
		errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Items: items, Now: 11})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				t.Fatal(e)
			}
		}
	}
	if want := n/50 + 2*(n/100); checked < want {
		t.Fatalf("%d sized batches checked, want at least %d (inserts, leases, acks)", checked, want)
	}
	mustVerify(t, s)
}
