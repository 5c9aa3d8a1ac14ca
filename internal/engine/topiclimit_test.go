package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

// TestTopicLimit: any produce token could create topics without end
// (20,000 of them tripled the RSS and made /metrics 8 MB). With
// MaxTopics, a send or settings change that would create a topic beyond
// it is a conflict naming the limit; existing topics keep working, also
// after a restart with a lower limit, and a topic another server created
// is recognised although this one has not listed it yet.
func TestTopicLimit(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	open := func(max int) *engine.Engine {
		t.Helper()
		e, err := engine.Open(ctx, engine.Config{Store: st, MaxTopics: max})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(ctx) })
		return e
	}
	sendTo := func(e *engine.Engine, topic string) error {
		_, err := e.Send(ctx, topic, domain.SendRequest{Payload: []byte("x"), When: domain.When{Delay: time.Hour}})
		return err
	}
	wantLimit := func(err error, limit int) {
		t.Helper()
		if !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("limit of %d topics", limit)) {
			t.Fatalf("err %v, want a conflict naming the limit of %d topics", err, limit)
		}
	}

	e := open(3)
	for _, topic := range []string{"a", "b", "a", "c"} {
		if err := sendTo(e, topic); err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
	}
	wantLimit(sendTo(e, "d"), 3)
	_, err := e.SendBatch(ctx, "d", []domain.SendRequest{{Payload: []byte("x")}, {Payload: []byte("y")}})
	wantLimit(err, 3)
	_, err = e.SetTopicSettings(ctx, "e", domain.TopicSettings{MaxAttempts: 3})
	wantLimit(err, 3)
	if _, err := e.SetTopicSettings(ctx, "b", domain.TopicSettings{MaxAttempts: 3}); err != nil {
		t.Fatalf("settings of an existing topic: %v", err)
	}
	if err := sendTo(e, "c"); err != nil {
		t.Fatalf("send to an existing topic at the limit: %v", err)
	}
	topics, err := e.Topics(ctx)
	if err != nil || len(topics) != 3 {
		t.Fatalf("topics %d (%v), want 3: refused writes must create nothing", len(topics), err)
	}

	// Another server on the store (no limit there) creates a topic; this
	// one, at its limit, accepts sends to it before its next sweep.
	other := open(0)
	if err := sendTo(other, "from-other"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo(e, "from-other"); err != nil {
		t.Fatalf("send to a topic another server made: %v", err)
	}

	// A restart with a lower limit: every existing topic works, none is added.
	low := open(2)
	for _, topic := range []string{"a", "b", "c", "from-other"} {
		if err := sendTo(low, topic); err != nil {
			t.Fatalf("after restart, send to existing %s: %v", topic, err)
		}
	}
	wantLimit(sendTo(low, "f"), 2)

	// 0: no limit.
	for i := range 20 {
		if err := sendTo(other, fmt.Sprintf("free-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := engine.Open(ctx, engine.Config{Store: st, MaxTopics: -1}); err == nil {
		t.Error("a negative MaxTopics was accepted")
	}
}

// TestTopicLimitExemptsSchedules: a recurring schedule (only an admin on
// "*" may make one) delivers to its topic even when creating that topic
// goes beyond the limit.
func TestTopicLimitExemptsSchedules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{MaxTopics: 1})
		send(t, b, "full", "m1", time.Hour)
		if _, err := b.e.ScheduleSet(b.ctx, domain.Schedule{Name: "every-minute", Topic: "ticks", Cron: "* * * * *", Payload: []byte("tick")}); err != nil {
			t.Fatal(err)
		}
		var got int
		for i := 0; i < 5 && got == 0; i++ {
			got = len(lease(t, b, "ticks", 1, 30*time.Second))
		}
		if got != 1 {
			t.Fatal("no tick delivered within 2.5 minutes")
		}
	})
}
