package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/wire"
)

func TestCLIMessagesAndTopicPause(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	ctx := context.Background()
	for _, a := range [][]string{{"m1", "3h"}, {"m2", "1h"}, {"m3", "2h"}, {"m4", "4h"}} {
		b.run(t, "send", "jobs", "x", "--id", a[0], "--delay", a[1]).ok(t)
	}
	b.run(t, "send", "jobs", "now", "--id", "r1").ok(t)

	r := b.run(t, "messages", "list", "jobs", "--state", "scheduled").ok(t)
	if !regexp.MustCompile(`^ID +STATE +DUE +PRIORITY +ATTEMPTS +FAILURES\nm2 +scheduled .*\nm3 .*\nm1 .*\nm4 .*\n$`).MatchString(r.stdout) {
		t.Fatalf("messages list:\n%s", r.stdout)
	}
	r = b.run(t, "messages", "list", "jobs", "--state", "scheduled", "--limit", "2", "--json").ok(t)
	page := decodeJSON[wire.MessagePage](t, r.stdout)
	if len(page.Messages) != 2 || page.Next == "" || page.Messages[0].ID != "m2" {
		t.Fatalf("messages list --json %+v", page)
	}
	r = b.run(t, "messages", "list", "jobs", "--state", "scheduled", "--limit", "2").ok(t)
	if !strings.HasSuffix(r.stdout, "more: delayq messages list jobs --state scheduled --cursor "+page.Next+"\n") {
		t.Fatalf("no next-page hint:\n%s", r.stdout)
	}

	// Reschedule the two soonest to the same time, then cancel by state.
	before := page.Messages[1].DeliverAt.Add(time.Millisecond).Format("2006-01-02T15:04:05.999999999Z07:00")
	r = b.run(t, "messages", "reschedule", "jobs", "--state", "scheduled", "--due-before", before, "--delay", "10h").ok(t)
	if r.stdout != "rescheduled 2 messages of jobs\n" {
		t.Fatalf("reschedule: %q", r.stdout)
	}
	r = b.run(t, "messages", "cancel", "jobs", "--state", "ready", "--json").ok(t)
	if c := decodeJSON[wire.CountResponse](t, r.stdout); c.Count != 1 {
		t.Fatalf("cancel ready: %+v", c)
	}
	ti, err := b.eng.Topic(ctx, "jobs")
	if err != nil || ti.Counts.Scheduled != 4 || ti.Counts.Ready != 0 {
		t.Fatalf("after the bulk changes: %+v %v", ti, err)
	}

	r = b.run(t, "topic", "pause", "jobs").ok(t)
	if r.stdout != "paused jobs: 4 scheduled, 0 ready, 0 inflight, 0 dead\n" {
		t.Fatalf("pause: %q", r.stdout)
	}
	b.run(t, "send", "jobs", "while paused", "--id", "p1").ok(t)
	if ms, err := b.eng.Lease(ctx, "jobs", delayq.LeaseRequest{Max: 10}); err != nil || len(ms) != 0 {
		t.Fatalf("leased %v from a paused topic (%v)", ms, err)
	}
	r = b.run(t, "topic", "resume", "jobs", "--json").ok(t)
	if tp := decodeJSON[wire.Topic](t, r.stdout); tp.Paused || tp.Counts.Ready != 1 {
		t.Fatalf("resume --json: %+v", tp)
	}

	// Delete: refused while the topic holds messages, then done.
	b.run(t, "topic", "delete", "jobs").failed(t, exitRequest, "delayq topic: topic jobs holds 4 scheduled, 1 ready, 0 inflight and 0 dead messages")
	b.run(t, "messages", "cancel", "jobs", "--state", "scheduled").ok(t)
	b.run(t, "messages", "cancel", "jobs", "--state", "ready").ok(t)
	if r := b.run(t, "topic", "delete", "jobs").ok(t); r.stdout != "deleted topic jobs\n" {
		t.Fatalf("delete: %q", r.stdout)
	}
	if _, err := b.eng.Topic(ctx, "jobs"); err == nil {
		t.Fatal("the deleted topic is still there")
	}
	b.run(t, "topic", "delete", "jobs").failed(t, exitRequest, "delayq topic: topic jobs not found")

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"messages", "list", "jobs"}, "delayq messages: list needs --state"},
		{[]string{"messages", "explode", "jobs"}, `delayq messages: unknown action "explode"`},
		{[]string{"messages", "reschedule", "jobs"}, "delayq messages: give --delay or --at"},
		{[]string{"messages", "cancel", "jobs", "--at", "2030-01-01T00:00:00Z"}, "delayq messages: cancel takes no --delay or --at"},
		{[]string{"messages", "list", "jobs", "--state", "ready", "--due-after", "soon"}, `delayq messages: invalid due-after: "soon"`},
		{[]string{"topic", "freeze", "jobs"}, `delayq topic: unknown action "freeze"`},
	} {
		b.run(t, tt.args...).failed(t, exitUsage, tt.want)
	}
	b.run(t, "messages", "cancel", "jobs", "--state", "inflight").failed(t, exitRequest, "delayq messages: invalid filter.state: inflight messages are not changed in bulk")
}
