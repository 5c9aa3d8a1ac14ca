package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/clock"
)

// --clock-offset (testing only) reads its environment variable like every
// flag, shifts the engine's clock, and stays out of -h.
func TestServeClockOffset(t *testing.T) {
	env := map[string]string{"DELAYQ_CLOCK_OFFSET": "-2s"}
	o, err := parseServe(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if o.clockOffset != -2*time.Second {
		t.Fatalf("DELAYQ_CLOCK_OFFSET=-2s: offset %v", o.clockOffset)
	}
	if o, err = parseServe([]string{"--clock-offset", "1500ms"}, func(k string) string { return env[k] }); err != nil || o.clockOffset != 1500*time.Millisecond {
		t.Fatalf("--clock-offset 1500ms beats the environment: %v %v", o.clockOffset, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := serveClock(o, log)
	if off, ok := c.(clock.Offset); !ok || off.By != 1500*time.Millisecond {
		t.Fatalf("engine clock %#v, want clock.Offset{By: 1.5s}", c)
	}
	if d := time.Until(c.Now()); d < time.Second || d > 2*time.Second {
		t.Fatalf("shifted clock reads %v from the system's", d)
	}
	if c := serveClock(&serveOpts{}, log); c != nil {
		t.Fatalf("no offset: engine clock %#v, want the default", c)
	}
	if _, err := parseServe([]string{"--clock-offset", "soon"}, func(string) string { return "" }); err == nil {
		t.Fatal("--clock-offset soon was accepted")
	}
	var out bytes.Buffer
	if code := runServe(context.Background(), []string{"-h"}, &out, io.Discard); code != 0 {
		t.Fatalf("serve -h: exit %d", code)
	}
	if h := out.String(); strings.Contains(h, "clock-offset") || !strings.Contains(h, "-drain-timeout") {
		t.Fatalf("serve -h shows the hidden flag or lost the others:\n%s", h)
	}
}
