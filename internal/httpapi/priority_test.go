package httpapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/pebblestore"
	"github.com/delayq/delayq/internal/wire"
)

// Message priority end to end, on the embedded engine and the Pebble store
// on a simulated clock: due messages are leased lowest priority first
// (then due time, then send order), and a priority-0 message scheduled
// later is not leased before its due time, however urgent.
func TestPriorityLeaseOrder(t *testing.T) {
	clk := clock.NewSim(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{Logger: quiet, BallastSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := setupEngine(t, engine.Config{Store: st, Clock: clk, Logger: quiet}, nil)

	want(t, b.do(t, "POST", "/v1/topics/jobs/messages", `{"id":"urgent-later","payload":"x","delay":"1m"}`), 201)
	r := b.do(t, "POST", "/v1/topics/jobs/messages:batch", `{"messages":[
		{"id":"p5","payload":"x","priority":5},
		{"id":"p0-a","payload":"x"},
		{"id":"p200","payload":"x","priority":200},
		{"id":"p1","payload":"x","priority":1},
		{"id":"p0-b","payload":"x","priority":0},
		{"id":"p255","payload":"x","priority":255}]}`)
	want(t, r, 200)
	for i, res := range into[wire.SendBatchResponse](t, r).Results {
		if res.Error != nil || res.Message == nil {
			t.Fatalf("batch item %d: %+v", i, res.Error)
		}
	}
	m := into[wire.Message](t, b.do(t, "GET", "/v1/topics/jobs/messages/p200", ""))
	if m.Priority != 200 {
		t.Fatalf("GET p200: priority %d", m.Priority)
	}
	if m := into[wire.Message](t, b.do(t, "GET", "/v1/topics/jobs/messages/urgent-later", "")); m.Priority != 0 || m.State != "scheduled" {
		t.Fatalf("GET urgent-later: %+v", m)
	}

	lease := func(max int) []string {
		t.Helper()
		r := b.do(t, "POST", "/v1/topics/jobs/lease", fmt.Sprintf(`{"max":%d,"wait":"0s"}`, max))
		want(t, r, 200)
		var ids []string
		for _, m := range into[wire.MessagesResponse](t, r).Messages {
			ids = append(ids, fmt.Sprintf("%s/%d", m.ID, m.Priority))
		}
		return ids
	}
	ctx := context.Background()
	clk.Advance(59 * time.Second) // urgent-later is due in a second
	if err := b.eng.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 7 { // one at a time: each lease picks the most urgent due message
		got = append(got, lease(1)...)
	}
	if w := []string{"p0-a/0", "p0-b/0", "p1/1", "p5/5", "p200/200", "p255/255"}; !slices.Equal(got, w) {
		t.Fatalf("leased %v, want %v (and not urgent-later, due in a minute)", got, w)
	}

	// A minute later urgent-later is due and goes before a priority-3
	// message that is due too.
	clk.Advance(time.Second)
	if err := b.eng.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, b.do(t, "POST", "/v1/topics/jobs/messages", `{"id":"p3","payload":"x","priority":3}`), 201)
	if got, w := lease(10), []string{"urgent-later/0", "p3/3"}; !slices.Equal(got, w) {
		t.Fatalf("after a minute: leased %v, want %v", got, w)
	}
}

// A priority out of 0..255 or not an integer is a 400 naming the field
// (by index in a batch), and nothing is stored.
func TestPriorityValidation(t *testing.T) {
	b := setup(t, nil)
	for _, body := range []string{`-1`, `256`, `1.5`, `"3"`, `true`, `1e3`} {
		r := b.do(t, "POST", "/v1/topics/jobs/messages", `{"payload":"x","priority":`+body+`}`)
		want(t, r, 400)
		if r.err.Field != "priority" {
			t.Errorf("priority %s: field %q, want priority (%s)", body, r.err.Field, r.raw)
		}
		r = b.do(t, "POST", "/v1/topics/jobs/messages:batch", `{"messages":[{"payload":"ok"},{"payload":"x","priority":`+body+`}]}`)
		want(t, r, 400)
		if r.err.Field != "messages[1].priority" {
			t.Errorf("batch priority %s: field %q, want messages[1].priority (%s)", body, r.err.Field, r.raw)
		}
	}
	if r := b.do(t, "GET", "/v1/topics/jobs", ""); r.status != 404 {
		tp := into[wire.Topic](t, r)
		if tp.Counts.Ready+tp.Counts.Scheduled != 0 {
			t.Fatalf("refused sends stored messages: %+v", tp.Counts)
		}
	}
}

// A schedule's template carries a priority into every message it sends;
// out of range is a 400 naming it.
func TestPrioritySchedule(t *testing.T) {
	clk := clock.NewSim(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	var b *bundle
	b = setupEngine(t, engine.Config{Clock: clk}, func(c *Config) { c.Scheduler = schedulerOf(&b) })
	r := b.do(t, "PUT", "/v1/schedules/digest", `{"topic":"mail","cron":"@every 1m","payload":"d","priority":7}`)
	want(t, r, 200)
	if s := into[wire.Schedule](t, r); s.Priority != 7 {
		t.Fatalf("schedule answer: priority %d", s.Priority)
	}
	r = b.do(t, "PUT", "/v1/schedules/bad", `{"topic":"mail","cron":"@every 1m","payload":"d","priority":300}`)
	want(t, r, 400)
	if r.err.Field != "priority" {
		t.Fatalf("priority 300: field %q (%s)", r.err.Field, r.raw)
	}
	clk.Advance(time.Minute)
	if err := b.eng.RunDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	ms := into[wire.MessagesResponse](t, b.do(t, "POST", "/v1/topics/mail/lease", `{"max":10,"wait":"0s"}`)).Messages
	if len(ms) != 1 || ms[0].Priority != 7 {
		t.Fatalf("leased from the schedule: %+v", ms)
	}
}
