package engine

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// TestSafetySweepReleasesWhatNoTimerArmed: a message the engine was never
// told about (written to its single-engine store behind its back, as a
// lost wake-up would leave it) is still released, by the safety sweep,
// within a few periods. Before the sweep ran on stores without
// notifications, nothing would ever arm its topic and the long-poll
// would time out empty.
func TestSafetySweepReleasesWhatNoTimerArmed(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	ctx := context.Background()
	e, err := Open(ctx, Config{Store: st, SafetySweep: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)

	now := time.Now().UnixMilli()
	if _, err := st.MessageInsertMany(ctx, &store.MessageInsertManyParams{
		Topic: "orders", Now: now,
		Messages: []store.InsertMessage{{ID: "unarmed", Payload: []byte("x"), DueAt: now + 50, MaxAttempts: 3}},
	}); err != nil {
		t.Fatal(err)
	}
	msgs, err := e.Lease(ctx, "orders", domain.LeaseRequest{Max: 1, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].ID != "unarmed" {
		t.Fatalf("leased %v, want the message no timer was armed for", msgs)
	}
	if got := time.Since(msgs[0].DeliverAt); got < 0 {
		t.Errorf("released %v before it was due", -got)
	}
}
