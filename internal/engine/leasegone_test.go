package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
)

// TestLeaseForAGoneCallerLeasesNothing: a lease whose caller has gone
// (its context ended: a client that hung up, a worker that stopped
// leasing just as a wake-up reached its long-poll) answers the context's
// error and leaves ready messages ready, rather than leasing them to
// nobody until their lease expires. A worker's StopAndCancel lost this
// race now and then: its long-poll, woken by the nack of the message it
// had just cancelled, leased it again and ran the handler a second time.
func TestLeaseForAGoneCallerLeasesNothing(t *testing.T) {
	b := setup(t, engine.Config{})
	send(t, b, "gone", "a", 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, wait := range []time.Duration{0, time.Second} {
		ms, err := b.e.Lease(ctx, "gone", domain.LeaseRequest{Max: 1, Wait: wait, Lease: time.Minute})
		if !errors.Is(err, context.Canceled) || len(ms) != 0 {
			t.Fatalf("lease (wait %v) with an ended context: %d messages, %v; want none and context.Canceled", wait, len(ms), err)
		}
	}
	if m, err := b.e.Get(b.ctx, "gone", "a"); err != nil || m.State != domain.StateReady {
		t.Fatalf("after the leases: %+v %v, want ready", m, err)
	}
	if ms := lease(t, b, "gone", 1, 0); len(ms) != 1 {
		t.Fatalf("a live caller leased %d messages, want 1", len(ms))
	}
}
