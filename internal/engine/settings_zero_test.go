package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store/memstore"
)

// TestExplicitZeroSettings: a zero jitter or initial backoff given on
// purpose is kept — answered, used, and read back from the stored blob by
// another engine on the same store — while an absent one takes the
// default. Stores keep the blob as bytes, so this holds on every engine.
func TestExplicitZeroSettings(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	clk := &offsetClock{}
	e := openOn(t, st, clk)
	got, err := e.SetTopicSettings(ctx, "zero", domain.TopicSettings{Backoff: domain.Backoff{JitterSet: true, InitialSet: true}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Backoff.Jitter != 0 || got.Backoff.Initial != 0 || got.Backoff.Max != time.Hour {
		t.Fatalf("answer %+v: want jitter 0, initial 0, max the default", got.Backoff)
	}
	if _, err := e.SetTopicSettings(ctx, "unset", domain.TopicSettings{MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	other := openOn(t, st, clk) // reads the blobs, not the first engine's cache
	for topic, want := range map[string][2]float64{"zero": {0, 0}, "unset": {0.2, float64(time.Second)}} {
		info, err := other.Topic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if b := info.Settings.Backoff; b.Jitter != want[0] || float64(b.Initial) != want[1] {
			t.Errorf("%s read back: jitter %g, initial %v; want %g, %v", topic, b.Jitter, b.Initial, want[0], time.Duration(want[1]))
		}
	}
	// Used, not just shown: with initial 0 and no jitter a nack retries at once.
	if _, err := other.Send(ctx, "zero", domain.SendRequest{ID: "m", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ms, err := other.Lease(ctx, "zero", domain.LeaseRequest{Max: 1, Wait: time.Second})
	if err != nil || len(ms) != 1 {
		t.Fatalf("lease: %v %d", err, len(ms))
	}
	n, err := other.Nack(ctx, "zero", "m", ms[0].Receipt, domain.NackRequest{Reason: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if n.State != domain.StateReady && n.DeliverAt.After(clk.Now()) {
		t.Fatalf("after nack: %s due %v, want due at once", n.State, n.DeliverAt)
	}
}
