package engine_test

import (
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

func TestPauseResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		b := setup(t, engine.Config{Store: st})
		send(t, b, "p", "before", 0)
		ti, err := b.e.PauseTopic(b.ctx, "p", true)
		if err != nil || !ti.Paused {
			t.Fatalf("pause: %+v %v", ti, err)
		}
		send(t, b, "p", "during", 0) // sends are accepted while paused
		if got := lease(t, b, "p", 10, 0); len(got) != 0 {
			t.Fatalf("leased %v from a paused topic", ids(got))
		}
		// A long-poll waits through the pause and is woken by the resume.
		done := make(chan []*domain.Message)
		go func() { done <- lease(t, b, "p", 10, 20*time.Second) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case got := <-done:
			t.Fatalf("long-poll answered %v while paused", ids(got))
		default:
		}
		// Settings replaced while paused keep the pause.
		if _, err := b.e.SetTopicSettings(b.ctx, "p", domain.TopicSettings{MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		if ti, _ := b.e.Topic(b.ctx, "p"); !ti.Paused || ti.Counts.Ready != 2 {
			t.Fatalf("after settings put: %+v", ti)
		}
		start := time.Now()
		if ti, err := b.e.PauseTopic(b.ctx, "p", false); err != nil || ti.Paused {
			t.Fatalf("resume: %+v %v", ti, err)
		}
		got := <-done
		if fmt.Sprint(ids(got)) != "[before during]" || time.Since(start) > time.Second {
			t.Fatalf("after resume: %v after %v", ids(got), time.Since(start))
		}

		// The pause is stored: an engine opened later on the store sees it.
		if _, err := b.e.PauseTopic(b.ctx, "p", true); err != nil {
			t.Fatal(err)
		}
		_ = b.e.Close(b.ctx)
		b2 := setup(t, engine.Config{Store: st})
		send(t, b2, "p", "later", 0)
		if ti, _ := b2.e.Topic(b2.ctx, "p"); !ti.Paused {
			t.Fatalf("pause lost by a restart: %+v", ti)
		}
		if got := lease(t, b2, "p", 10, 0); len(got) != 0 {
			t.Fatalf("leased %v after a restart, paused", ids(got))
		}
	})
}

func TestListAndBulk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		for i := range 10 {
			send(t, b, "t", fmt.Sprintf("s%d", i), time.Duration(10-i)*time.Minute) // s9 soonest
		}
		send(t, b, "t", "r0", 0)
		send(t, b, "t", "r1", 0)
		if got := lease(t, b, "t", 1, 0); len(got) != 1 || got[0].ID != "r0" {
			t.Fatalf("lease: %v", ids(got))
		}
		list := func(f domain.MessageFilter, limit int) []string {
			t.Helper()
			var all []string
			cursor := ""
			for {
				p, err := b.e.ListMessages(b.ctx, "t", domain.ListRequest{Filter: f, Limit: limit, Cursor: cursor})
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, ids(p.Messages)...)
				if p.Next == "" {
					return all
				}
				cursor = p.Next
			}
		}
		if got := fmt.Sprint(list(domain.MessageFilter{State: domain.StateScheduled}, 3)); got != "[s9 s8 s7 s6 s5 s4 s3 s2 s1 s0]" {
			t.Fatalf("scheduled: %s", got)
		}
		if got := fmt.Sprint(list(domain.MessageFilter{State: domain.StateReady}, 3)); got != "[r1]" {
			t.Fatalf("ready: %s", got)
		}
		if got := fmt.Sprint(list(domain.MessageFilter{State: domain.StateInflight}, 3)); got != "[r0]" {
			t.Fatalf("inflight: %s", got)
		}
		now := time.Now()
		window := domain.MessageFilter{State: domain.StateScheduled, DueAfter: now.Add(2 * time.Minute), DueBefore: now.Add(5 * time.Minute)}
		if got := fmt.Sprint(list(window, 1)); got != "[s8 s7 s6]" {
			t.Fatalf("window: %s", got)
		}

		for _, c := range []struct {
			req   domain.ListRequest
			field string
		}{
			{domain.ListRequest{Filter: domain.MessageFilter{State: "nope"}}, "state"},
			{domain.ListRequest{Filter: domain.MessageFilter{State: domain.StateReady}, Limit: 1001}, "limit"},
			{domain.ListRequest{Filter: domain.MessageFilter{State: domain.StateDead, DueBefore: now}}, "due_after"},
			{domain.ListRequest{Filter: domain.MessageFilter{State: domain.StateReady}, Cursor: "x"}, "cursor"},
		} {
			_, err := b.e.ListMessages(b.ctx, "t", c.req)
			var ve *domain.InvalidError
			if !errors.As(err, &ve) || ve.Field != c.field {
				t.Errorf("%+v: %v, want an error naming %s", c.req, err, c.field)
			}
		}

		// Reschedule the window to one instant; the bulk answers its count.
		at := now.Add(time.Hour).Truncate(time.Millisecond)
		n, err := b.e.RescheduleMessages(b.ctx, "t", window, domain.When{DeliverAt: at})
		if err != nil || n != 3 {
			t.Fatalf("reschedule: %d %v", n, err)
		}
		if got := fmt.Sprint(list(domain.MessageFilter{State: domain.StateScheduled, DueAfter: at}, 10)); got != "[s6 s7 s8]" {
			t.Fatalf("rescheduled: %s", got)
		}
		// Inflight messages are never changed in bulk.
		if _, err := b.e.CancelMessages(b.ctx, "t", domain.MessageFilter{State: domain.StateInflight}); !errors.Is(err, domain.ErrInvalid) {
			t.Fatalf("bulk cancel of inflight: %v", err)
		}
		// No state: scheduled and ready, inflight untouched.
		n, err = b.e.CancelMessages(b.ctx, "t", domain.MessageFilter{})
		if err != nil || n != 11 {
			t.Fatalf("cancel all: %d %v", n, err)
		}
		ti, _ := b.e.Topic(b.ctx, "t")
		if ti.Counts != (domain.TopicCounts{Inflight: 1}) {
			t.Fatalf("counts after cancel: %+v", ti.Counts)
		}
	})
}

// TestDeleteTopicForgetsSettings: deleting a paused, emptied topic drops
// what this engine cached, so the next send to it is leased at once with
// the defaults; a topic holding messages is refused, naming them.
func TestDeleteTopicForgetsSettings(t *testing.T) {
	b := setup(t, engine.Config{})
	send(t, b, "d", "m", 0)
	if _, err := b.e.SetTopicSettings(b.ctx, "d", domain.TopicSettings{MaxAttempts: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.PauseTopic(b.ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	err := b.e.DeleteTopic(b.ctx, "d")
	if !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), "0 scheduled, 1 ready") {
		t.Fatalf("delete of a topic holding a message: %v", err)
	}
	if n, err := b.e.CancelMessages(b.ctx, "d", domain.MessageFilter{State: domain.StateReady}); n != 1 || err != nil {
		t.Fatalf("cancel: %d %v", n, err)
	}
	if err := b.e.DeleteTopic(b.ctx, "d"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := b.e.Topic(b.ctx, "d"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Topic after delete: %v", err)
	}
	if err := b.e.DeleteTopic(b.ctx, "d"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	send(t, b, "d", "again", 0)
	got := lease(t, b, "d", 10, 0)
	if len(got) != 1 {
		t.Fatalf("leased %v after the paused topic was deleted and sent to again", ids(got))
	}
	if ti, err := b.e.Topic(b.ctx, "d"); err != nil || ti.Paused || ti.Settings.MaxAttempts == 7 {
		t.Fatalf("topic made again: %+v %v", ti, err)
	}
}
