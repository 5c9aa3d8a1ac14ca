package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

// eventLog keeps the events it is given as short strings.
type eventLog struct {
	mu  sync.Mutex
	got []string
}

func (l *eventLog) handle(ev engine.Event) {
	s := fmt.Sprintf("%d %s", ev.Kind, ev.Topic)
	switch {
	case ev.Message != nil:
		s += fmt.Sprintf(" %s %s", ev.Message.ID, ev.Message.State)
	case ev.ID != "":
		s += " " + ev.ID
	}
	if ev.N != 0 {
		s += fmt.Sprintf(" n=%d", ev.N)
	}
	if ev.Reason != "" {
		s += " " + ev.Reason
	}
	if ev.Batch {
		s += " batch"
	}
	l.mu.Lock()
	l.got = append(l.got, s)
	l.mu.Unlock()
}

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

func ev(k engine.EventKind, rest string) string { return fmt.Sprintf("%d %s", k, rest) }

// TestEvents: each call that changes a message emits its counting event
// and, to subscriptions that ask for them, its message event; a
// subscription gets only the kinds it asked for.
func TestEvents(t *testing.T) {
	ctx := context.Background()
	var all, counts eventLog
	e, err := engine.Open(ctx, engine.Config{Store: memstore.New(), Subscriptions: []engine.Subscription{
		{Kinds: engine.CountingEvents | engine.MessageEvents | engine.Mask(engine.EventTopicSettingsChanged), Handle: all.handle},
		{Kinds: engine.CountingEvents, Handle: counts.handle},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	check := func(what string, want ...string) {
		t.Helper()
		if got := all.take(); !slices.Equal(got, want) {
			t.Errorf("%s: events\n%q\nwant\n%q", what, got, want)
		}
	}
	if _, err := e.SendBatch(ctx, "t", []domain.SendRequest{{ID: "a"}, {ID: "b"}, {ID: "c", When: domain.When{Delay: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	check("send", ev(engine.EventSent, "t n=3"), ev(engine.EventMessageSent, "t a ready"), ev(engine.EventMessageSent, "t b ready"), ev(engine.EventMessageSent, "t c scheduled"))
	if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	check("duplicate send")
	ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 2})
	if err != nil || len(ms) != 2 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	check("lease", ev(engine.EventDelivered, "t"), ev(engine.EventMessageLeased, "t a inflight"), ev(engine.EventDelivered, "t"), ev(engine.EventMessageLeased, "t b inflight"))
	if err := e.Ack(ctx, "t", "a", ms[0].Receipt); err != nil {
		t.Fatal(err)
	}
	check("ack", ev(engine.EventAcked, "t n=1"), ev(engine.EventMessageAcked, "t a"))
	if _, err := e.Nack(ctx, "t", "b", ms[1].Receipt, domain.NackRequest{Reason: "boom", HasDelay: true, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	check("nack", ev(engine.EventNacked, "t n=1"), ev(engine.EventMessageNacked, "t b scheduled boom"))
	if _, err := e.Reschedule(ctx, "t", "b", domain.When{Delay: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	check("reschedule", ev(engine.EventMessageRescheduled, "t b scheduled"))
	if _, err := e.Cancel(ctx, "t", "c"); err != nil {
		t.Fatal(err)
	}
	check("cancel", ev(engine.EventCancelled, "t n=1"), ev(engine.EventMessageCancelled, "t c scheduled"))
	if _, err := e.SetTopicSettings(ctx, "d", domain.TopicSettings{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	check("settings", ev(engine.EventTopicSettingsChanged, "d"))
	if _, err := e.SendBatch(ctx, "d", []domain.SendRequest{{ID: "x"}, {ID: "y"}}); err != nil {
		t.Fatal(err)
	}
	ms, err = e.Lease(ctx, "d", domain.LeaseRequest{Max: 2})
	if err != nil || len(ms) != 2 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	if _, err := e.AckBatch(ctx, "d", []domain.AckRequest{{ID: "x", Receipt: ms[0].Receipt}, {ID: "y", Receipt: "stale"}}); err != nil {
		t.Fatal(err)
	}
	all.take()
	if _, err := e.Nack(ctx, "d", "y", ms[1].Receipt, domain.NackRequest{}); err != nil {
		t.Fatal(err)
	}
	check("nack to dead", ev(engine.EventNacked, "d n=1"), ev(engine.EventDied, "d n=1"), ev(engine.EventMessageNacked, "d y dead"))
	if _, err := e.DeadReplay(ctx, "d", "y"); err != nil {
		t.Fatal(err)
	}
	check("replay", ev(engine.EventMessageReplayed, "d y ready"))

	// The counting subscription saw the same counts and nothing else.
	for _, s := range counts.take() {
		var k engine.EventKind
		if _, err := fmt.Sscan(s, &k); err != nil || !engine.CountingEvents.Has(k) {
			t.Errorf("counting subscription got %q", s)
		}
	}
}

// TestEventsAckBatchAndDelete: AckBatch reports each acked message (not
// the refused ones) and DeadDelete the deleted dead letter.
func TestEventsAckBatchAndDelete(t *testing.T) {
	ctx := context.Background()
	var l eventLog
	e, err := engine.Open(ctx, engine.Config{Store: memstore.New(), Subscriptions: []engine.Subscription{
		{Kinds: engine.Mask(engine.EventAcked, engine.EventMessageAcked, engine.EventMessageDeleted), Handle: l.handle},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if _, err := e.SetTopicSettings(ctx, "t", domain.TopicSettings{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SendBatch(ctx, "t", []domain.SendRequest{{ID: "x"}, {ID: "y"}, {ID: "z"}}); err != nil {
		t.Fatal(err)
	}
	ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 3})
	if err != nil || len(ms) != 3 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	if _, err := e.AckBatch(ctx, "t", []domain.AckRequest{{ID: "x", Receipt: ms[0].Receipt}, {ID: "y", Receipt: "stale"}, {ID: "z", Receipt: ms[2].Receipt}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Nack(ctx, "t", "y", ms[1].Receipt, domain.NackRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := e.DeadDelete(ctx, "t", "y"); err != nil {
		t.Fatal(err)
	}
	want := []string{ev(engine.EventMessageAcked, "t x batch"), ev(engine.EventMessageAcked, "t z batch"), ev(engine.EventAcked, "t n=2"), ev(engine.EventMessageDeleted, "t y")}
	if got := l.take(); !slices.Equal(got, want) {
		t.Errorf("events\n%q\nwant\n%q", got, want)
	}
}

// TestSubscribeCancel: a subscription made after Open gets events until
// it is cancelled.
func TestSubscribeCancel(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	var l eventLog
	cancel := e.Subscribe(engine.Subscription{Kinds: engine.Mask(engine.EventTopicSettingsChanged), Handle: l.handle})
	if _, err := e.SetTopicSettings(ctx, "a", domain.TopicSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Send(ctx, "a", domain.SendRequest{}); err != nil {
		t.Fatal(err)
	}
	cancel()
	cancel() // idempotent
	if _, err := e.SetTopicSettings(ctx, "b", domain.TopicSettings{}); err != nil {
		t.Fatal(err)
	}
	if got, want := l.take(), []string{ev(engine.EventTopicSettingsChanged, "a")}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
