package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/wire"
)

func TestCLISchedule(t *testing.T) {
	b := setupCLI(t)
	r := b.run(t, "schedule", "set", "nightly", "reports", "30 2 * * *", `{"run":1}`, "--timezone", "Europe/Paris", "--header", "k=v", "--delay", "5s").ok(t)
	if !strings.Contains(r.stdout, "Europe/Paris") || !strings.Contains(r.stdout, "next tick") {
		t.Fatalf("set: %q", r.stdout)
	}
	r = b.run(t, "schedule", "list").ok(t)
	if !strings.Contains(r.stdout, "nightly") || !strings.Contains(r.stdout, "active") {
		t.Fatalf("list: %q", r.stdout)
	}
	r = b.run(t, "schedule", "pause", "nightly", "--json").ok(t)
	var s wire.Schedule
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || !s.Paused || s.NextTick != nil {
		t.Fatalf("pause --json: %q %v", r.stdout, err)
	}
	r = b.run(t, "schedule", "resume", "nightly").ok(t)
	if !strings.Contains(r.stdout, "paused") || !strings.Contains(r.stdout, "false") {
		t.Fatalf("resume: %q", r.stdout)
	}
	b.run(t, "schedule", "get", "nightly").ok(t)
	b.run(t, "schedule", "delete", "nightly").ok(t)
	b.run(t, "schedule", "get", "nightly").failed(t, exitRequest, "delayq schedule: schedule nightly not found")
	b.run(t, "schedule", "set", "x", "t", "not a cron").failed(t, exitRequest, "delayq schedule:")
	b.run(t, "schedule", "frobnicate").failed(t, exitUsage, "delayq schedule: unknown action")
	b.run(t, "schedule", "get").failed(t, exitUsage, "delayq schedule: wrong arguments")
}
