package reliability

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// TestS12LeaseFencing: an overslept consumer's ack is refused with 409 and
// the message is redelivered; extend works before expiry and not after.
func TestS12LeaseFencing(t *testing.T) {
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 10*time.Second)
	ctx := context.Background()
	const topic = "s12"
	if _, err := c.Send(ctx, topic, delayq.SendRequest{ID: "m", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	lease := func(d time.Duration) *delayq.Message {
		t.Helper()
		ms, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 1, Lease: d, Wait: 5 * time.Second})
		if err != nil || len(ms) != 1 {
			t.Fatalf("lease: %v %v", ms, err)
		}
		return ms[0]
	}
	m1 := lease(time.Second)
	// Extend before expiry works and moves the expiry.
	ext, err := c.Extend(ctx, topic, "m", m1.Receipt, time.Second)
	if err != nil {
		t.Fatalf("extend before expiry: %v", err)
	}
	if ext.LeaseExpiresAt.Before(m1.LeaseExpiresAt) {
		t.Errorf("extend moved the expiry back: %v → %v", m1.LeaseExpiresAt, ext.LeaseExpiresAt)
	}
	time.Sleep(time.Until(ext.LeaseExpiresAt) + 300*time.Millisecond) // oversleep
	// The expired lease is redelivered at once, with a new receipt.
	m2 := lease(30 * time.Second)
	if m2.Receipt == m1.Receipt || m2.Attempt != m1.Attempt+1 {
		t.Fatalf("redelivery: receipt %q attempt %d after %q attempt %d", m2.Receipt, m2.Attempt, m1.Receipt, m1.Attempt)
	}
	if err := c.Ack(ctx, topic, "m", m1.Receipt); !errors.Is(err, delayq.ErrConflict) {
		t.Fatalf("late ack with the stale receipt: %v, want 409", err)
	}
	if _, err := c.Extend(ctx, topic, "m", m1.Receipt, time.Minute); !errors.Is(err, delayq.ErrConflict) {
		t.Fatalf("extend with the stale receipt: %v, want 409", err)
	}
	// The stale ack did not touch the new lease.
	got, err := c.Get(ctx, topic, "m")
	if err != nil || got.State != delayq.StateInflight {
		t.Fatalf("after stale ack: %v %v, want inflight", got, err)
	}
	if err := c.Ack(ctx, topic, "m", m2.Receipt); err != nil {
		t.Fatalf("ack with the current receipt: %v", err)
	}
	// Extend after expiry fails.
	if _, err := c.Send(ctx, topic, delayq.SendRequest{ID: "n", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	n1 := lease(500 * time.Millisecond)
	time.Sleep(time.Until(n1.LeaseExpiresAt) + 300*time.Millisecond)
	if _, err := c.Extend(ctx, topic, "n", n1.Receipt, time.Minute); !errors.Is(err, delayq.ErrConflict) {
		t.Fatalf("extend after expiry: %v, want 409", err)
	}
	writeResults(t, "S12-lease-fencing", map[string]any{"scenario": "S12 lease fencing", "tier": tier(), "date": time.Now().UTC().Format(time.RFC3339), "ok": !t.Failed()})
}
