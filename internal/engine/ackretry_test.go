package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/engine/enginetest"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

// onSingleServerStores runs test on an engine over each store only one
// server opens (the networked ones run it through two servers in their
// own packages).
func onSingleServerStores(t *testing.T, test func(t *testing.T, e *engine.Engine)) {
	for name, open := range map[string]func(t *testing.T) store.Store{
		"memstore": func(*testing.T) store.Store { return memstore.New() },
		"pebble": func(t *testing.T) store.Store {
			st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	} {
		t.Run(name, func(t *testing.T) { test(t, enginetest.Open(t, open(t), engine.Config{})) })
	}
}

// TestAckRetried: an ack retried after it was done is answered ok, a
// stale receipt is still a conflict — on the stores one server opens.
func TestAckRetried(t *testing.T) {
	onSingleServerStores(t, func(t *testing.T, e *engine.Engine) { enginetest.AckRetried(t, e, e) })
}

// TestAckRetriedNotCountedAgain: a retried ack answers ok without a
// second "acked" event or count (metrics, webhooks and the dashboard would
// count the message twice).
func TestAckRetriedNotCountedAgain(t *testing.T) {
	ctx := context.Background()
	var l eventLog
	e, err := engine.Open(ctx, engine.Config{Store: memstore.New(), Subscriptions: []engine.Subscription{
		{Kinds: engine.Mask(engine.EventAcked, engine.EventMessageAcked), Handle: l.handle},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if _, err := e.SendBatch(ctx, "t", []domain.SendRequest{{ID: "x"}, {ID: "y"}}); err != nil {
		t.Fatal(err)
	}
	ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 2})
	if err != nil || len(ms) != 2 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	if err := e.Ack(ctx, "t", "x", ms[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if err := e.Ack(ctx, "t", "x", ms[0].Receipt); err != nil {
		t.Fatalf("retried ack: %v", err)
	}
	errs, err := e.AckBatch(ctx, "t", []domain.AckRequest{{ID: "x", Receipt: ms[0].Receipt}, {ID: "y", Receipt: ms[1].Receipt}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("batch with a retried ack: %v %v", errs, err)
	}
	want := []string{ev(engine.EventAcked, "t n=1"), ev(engine.EventMessageAcked, "t x"), ev(engine.EventMessageAcked, "t y batch"), ev(engine.EventAcked, "t n=1")}
	if got := l.take(); !slices.Equal(got, want) {
		t.Errorf("events\n%q\nwant\n%q", got, want)
	}
}

// TestNackRetried: a nack retried after it was done is answered with the
// message as it left it; other deliveries' receipts are conflicts — on the
// stores one server opens.
func TestNackRetried(t *testing.T) {
	onSingleServerStores(t, func(t *testing.T, e *engine.Engine) { enginetest.NackRetried(t, e, e) })
}

// TestNackRetriedNotCountedAgain: a retried nack answers ok without a
// second "nacked" event or count.
func TestNackRetriedNotCountedAgain(t *testing.T) {
	ctx := context.Background()
	var l eventLog
	e, err := engine.Open(ctx, engine.Config{Store: memstore.New(), Subscriptions: []engine.Subscription{
		{Kinds: engine.Mask(engine.EventNacked, engine.EventMessageNacked), Handle: l.handle},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	for range 2 {
		if _, err := e.Nack(ctx, "t", "x", ms[0].Receipt, domain.NackRequest{Reason: "boom"}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{ev(engine.EventNacked, "t n=1"), ev(engine.EventMessageNacked, "t x scheduled boom")}
	if got := l.take(); !slices.Equal(got, want) {
		t.Errorf("events after a nack and its retry\n%q\nwant\n%q", got, want)
	}
}

// cancelOnNackConflict cancels a message just after the store refused a
// nack of it: the race of a retried nack with a cancel.
type cancelOnNackConflict struct{ store.Store }

func (s cancelOnNackConflict) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	rec, err := s.Store.MessageNack(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		if _, cerr := s.Store.MessageCancel(ctx, &store.MessageCancelParams{Topic: p.Topic, ID: p.ID, Now: p.Now}); cerr != nil {
			return nil, cerr
		}
	}
	return rec, err
}

// TestNackRetriedAfterCancel: a retried nack that the store refused
// because the message had failed, and that finds it cancelled when it
// reads it back, answers not found (a nack after the cancel), not 409,
// which no order of the nack, its retry and the cancel would give.
func TestNackRetriedAfterCancel(t *testing.T) {
	ctx := context.Background()
	e := enginetest.Open(t, cancelOnNackConflict{memstore.New()}, engine.Config{})
	if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	req := domain.NackRequest{HasDelay: true, Reason: "boom"}
	if _, err := e.Nack(ctx, "t", "x", ms[0].Receipt, req); err != nil {
		t.Fatal(err)
	}
	if m, err := e.Nack(ctx, "t", "x", ms[0].Receipt, req); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("retried nack raced by a cancel: %+v, %v; want not found", m, err)
	}
}
