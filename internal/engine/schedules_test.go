package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// openOn opens an engine on st with clk; closed when the test ends (or
// earlier by the test).
func openOn(t *testing.T, st store.Store, clk *offsetClock) *engine.Engine {
	t.Helper()
	e, err := engine.Open(context.Background(), engine.Config{Store: st, Clock: clk})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// setClock moves clk so that it reads at.
func setClock(clk *offsetClock, at time.Time) { clk.Step(at.Sub(clk.Now())) }

// drain leases and acks everything ready in topic and returns the ids.
func drain(t *testing.T, e *engine.Engine, topic string) []string {
	t.Helper()
	var out []string
	for {
		ms, err := e.Lease(context.Background(), topic, domain.LeaseRequest{Max: 1000})
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		if len(ms) == 0 {
			return out
		}
		for _, m := range ms {
			out = append(out, m.ID)
			if err := e.Ack(context.Background(), topic, m.ID, m.Receipt); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
}

func tickIDs(name string, ts ...time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = domain.ScheduleMessageID(name, t)
	}
	return out
}

func sameIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// TestScheduleAcrossDST runs daily schedules in America/New_York through
// the 2026 spring-forward and fall-back days in virtual time: exactly one
// message per local time, the skipped 02:30 once (at 03:30 EDT), the
// repeated 01:30 once (at its first occurrence).
func TestScheduleAcrossDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	at := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, ny) }
	cases := []struct {
		name, cron string
		start, end time.Time
		want       []time.Time
	}{
		{"spring-0230", "30 2 * * *", at(3, 7, 0, 0), at(3, 9, 12, 0),
			[]time.Time{at(3, 7, 2, 30), at(3, 8, 3, 30), at(3, 9, 2, 30)}},
		{"fall-0130", "30 1 * * *", at(10, 31, 0, 0), at(11, 2, 12, 0),
			[]time.Time{at(10, 31, 1, 30), time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), at(11, 2, 1, 30)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := &offsetClock{}
				setClock(clk, c.start)
				e := openOn(t, memstore.New(), clk)
				ctx := context.Background()
				if _, err := e.ScheduleSet(ctx, domain.Schedule{Name: c.name, Topic: "dst", Cron: c.cron, Timezone: "America/New_York", Payload: []byte("tick")}); err != nil {
					t.Fatal(err)
				}
				var got []string
				var when []time.Time
				for clk.Now().Before(c.end) {
					ms, err := e.Lease(ctx, "dst", domain.LeaseRequest{Max: 10, Wait: 30 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					for _, m := range ms {
						got = append(got, m.ID)
						when = append(when, clk.Now())
						if clk.Now().Before(m.DeliverAt) {
							t.Fatalf("%s delivered at %v, before %v", m.ID, clk.Now(), m.DeliverAt)
						}
						_ = e.Ack(ctx, "dst", m.ID, m.Receipt)
					}
				}
				sameIDs(t, "messages", got, tickIDs(c.name, c.want...))
				for i, w := range when {
					if d := w.Sub(c.want[i]); d < 0 || d > 2*time.Second {
						t.Errorf("tick %v delivered at %v", c.want[i], w)
					}
				}
			})
		})
	}
}

// TestScheduleMissedOnRestart: ticks missed while no engine ran fire once
// (the latest) under fire-once, and not at all under skip; ticks after
// the restart fire normally. The engine reports the ticks it fired and
// those it did not send (EventScheduleFired, EventScheduleMissed).
func TestScheduleMissedOnRestart(t *testing.T) {
	for _, policy := range []domain.MissedPolicy{domain.MissedFireOnce, domain.MissedSkip} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Date(2026, 5, 1, 9, 55, 0, 0, time.UTC)
				clk := &offsetClock{}
				setClock(clk, start)
				st := memstore.New()
				ctx := context.Background()
				e1 := openOn(t, st, clk)
				created, err := e1.ScheduleSet(ctx, domain.Schedule{Name: "hourly", Topic: "m", Cron: "0 * * * *", Payload: []byte("x"), Missed: policy})
				if err != nil {
					t.Fatal(err)
				}
				if !created.LastTick.IsZero() { // never fired: no last tick (not its creation time)
					t.Errorf("new schedule: LastTick %v", created.LastTick)
				}
				time.Sleep(10 * time.Minute) // 10:00 fires
				if s, err := e1.ScheduleGet(ctx, "hourly"); err != nil || !s.LastTick.Equal(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)) {
					t.Errorf("after 10:00: LastTick %v, %v", s.LastTick, err)
				}
				if err := e1.Close(ctx); err != nil {
					t.Fatal(err)
				}
				setClock(clk, time.Date(2026, 5, 1, 15, 20, 0, 0, time.UTC)) // down 11:00 … 15:00
				var obs countObserver
				e2, err := engine.Open(ctx, engine.Config{Store: st, Clock: clk, Subscriptions: []engine.Subscription{obs.subscription()}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e2.Close(context.Background()) })
				synctest.Wait()
				time.Sleep(time.Second)
				want := []time.Time{time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
				if policy == domain.MissedFireOnce {
					want = append(want, time.Date(2026, 5, 1, 15, 0, 0, 0, time.UTC))
				}
				sameIDs(t, "after restart", drain(t, e2, "m"), tickIDs("hourly", want...))
				s, err := e2.ScheduleGet(ctx, "hourly")
				if err != nil {
					t.Fatal(err)
				}
				if !s.LastTick.Equal(time.Date(2026, 5, 1, 15, 0, 0, 0, time.UTC)) || !s.NextTick.Equal(time.Date(2026, 5, 1, 16, 0, 0, 0, time.UTC)) {
					t.Errorf("LastTick %v NextTick %v", s.LastTick, s.NextTick)
				}
				// 11:00 to 14:00 collapsed into 15:00, which fire-once sends
				// and skip drops (20 minutes late).
				wantFired, wantMissed := int64(1), int64(4)
				if policy == domain.MissedSkip {
					wantFired, wantMissed = 0, 5
				}
				if f, m := obs.fired.Load(), obs.missed.Load(); f != wantFired || m != wantMissed {
					t.Errorf("after restart: %d ticks fired, %d missed; want %d, %d", f, m, wantFired, wantMissed)
				}
				time.Sleep(time.Hour)
				sameIDs(t, "next hour", drain(t, e2, "m"), tickIDs("hourly", time.Date(2026, 5, 1, 16, 0, 0, 0, time.UTC)))
				if f, m := obs.fired.Load(), obs.missed.Load(); f != wantFired+1 || m != wantMissed {
					t.Errorf("next hour: %d ticks fired, %d missed; want %d, %d", f, m, wantFired+1, wantMissed)
				}
			})
		})
	}
}

// TestScheduleTwoEnginesOneMessagePerTick: two engines on one store both
// fire every tick; the tick's id makes exactly one message of each.
func TestScheduleTwoEnginesOneMessagePerTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC)
		clk := &offsetClock{}
		setClock(clk, start)
		st := memstore.New()
		ctx := context.Background()
		var obs countObserver
		e1, err := engine.Open(ctx, engine.Config{Store: st, Clock: clk, Subscriptions: []engine.Subscription{obs.subscription()}})
		if err != nil {
			t.Fatal(err)
		}
		defer e1.Close(ctx)
		if _, err := e1.ScheduleSet(ctx, domain.Schedule{Name: "minutely", Topic: "two", Cron: "* * * * *", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		e2, err := engine.Open(ctx, engine.Config{Store: st, Clock: clk, Subscriptions: []engine.Subscription{obs.subscription()}})
		if err != nil {
			t.Fatal(err)
		}
		defer e2.Close(ctx)
		time.Sleep(10 * time.Minute)
		var want []time.Time
		for i := 1; i <= 10; i++ {
			want = append(want, time.Date(2026, 5, 1, 10, i, 0, 0, time.UTC))
		}
		sameIDs(t, "messages", drain(t, e2, "two"), tickIDs("minutely", want...))
		if n := obs.sent.Load(); n != 10 {
			t.Errorf("engines sent %d new messages, want 10", n)
		}
		// Each tick is reported fired once, by the engine whose send was
		// not a duplicate: the sum over engines counts the ticks.
		if f, m := obs.fired.Load(), obs.missed.Load(); f != 10 || m != 0 {
			t.Errorf("engines reported %d ticks fired and %d missed, want 10 and 0", f, m)
		}
	})
}

func TestSchedulePauseResumeDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &offsetClock{}
		setClock(clk, time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC))
		e := openOn(t, memstore.New(), clk)
		ctx := context.Background()
		if _, err := e.ScheduleSet(ctx, domain.Schedule{Name: "p", Topic: "p", Cron: "@every 1m", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Second)
		if got := drain(t, e, "p"); len(got) != 2 {
			t.Fatalf("before pause: %v", got)
		}
		s, err := e.SchedulePause(ctx, "p", true)
		if err != nil || !s.Paused || !s.NextTick.IsZero() {
			t.Fatalf("pause: %+v %v", s, err)
		}
		time.Sleep(10 * time.Minute)
		if got := drain(t, e, "p"); len(got) != 0 {
			t.Fatalf("while paused: %v", got)
		}
		if _, err := e.SchedulePause(ctx, "p", false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		if got := drain(t, e, "p"); len(got) != 0 {
			t.Fatalf("resumed: the paused ticks came back: %v", got)
		}
		time.Sleep(time.Minute)
		if got := drain(t, e, "p"); len(got) != 1 {
			t.Fatalf("after resume: %v", got)
		}
		if err := e.ScheduleDelete(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		if got := drain(t, e, "p"); len(got) != 0 {
			t.Fatalf("after delete: %v", got)
		}
		if _, err := e.ScheduleGet(ctx, "p"); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if err := e.ScheduleDelete(ctx, "p"); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("delete again: %v", err)
		}
	})
}

func TestScheduleValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{MaxPayload: 10})
		ok := domain.Schedule{Name: "n", Topic: "t", Cron: "0 * * * *"}
		cases := []struct {
			field string
			mod   func(*domain.Schedule)
		}{
			{"name", func(s *domain.Schedule) { s.Name = "a b" }},
			{"name", func(s *domain.Schedule) { s.Name = strings.Repeat("n", 151) }},
			{"topic", func(s *domain.Schedule) { s.Topic = "" }},
			{"cron", func(s *domain.Schedule) { s.Cron = "* * *" }},
			{"cron", func(s *domain.Schedule) { s.Cron = "0 0 30 2 *" }},
			{"timezone", func(s *domain.Schedule) { s.Timezone = "Nowhere/City" }},
			{"missed", func(s *domain.Schedule) { s.Missed = "always" }},
			{"delay", func(s *domain.Schedule) { s.Delay = -time.Second }},
			{"max_attempts", func(s *domain.Schedule) { s.MaxAttempts = -1 }},
			{"headers", func(s *domain.Schedule) { s.Headers = map[string]string{"": "x"} }},
		}
		for _, c := range cases {
			s := ok
			c.mod(&s)
			_, err := b.e.ScheduleSet(b.ctx, s)
			var inv *domain.InvalidError
			if !errors.As(err, &inv) || inv.Field != c.field {
				t.Errorf("%s: got %v, want an InvalidError on %q", c.field, err, c.field)
			}
		}
		s := ok
		s.Payload = []byte("0123456789abc")
		if _, err := b.e.ScheduleSet(b.ctx, s); !errors.Is(err, domain.ErrTooLarge) {
			t.Errorf("large payload: %v", err)
		}
		got, err := b.e.ScheduleSet(b.ctx, ok)
		if err != nil {
			t.Fatal(err)
		}
		if got.Missed != domain.MissedFireOnce || got.NextTick.IsZero() || got.CreatedAt.IsZero() {
			t.Errorf("defaults: %+v", got)
		}
		list, err := b.e.ScheduleList(b.ctx)
		if err != nil || len(list) != 1 || list[0].Name != "n" {
			t.Errorf("list: %v %v", list, err)
		}
	})
}
