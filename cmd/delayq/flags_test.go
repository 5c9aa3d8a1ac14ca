package main

import (
	"strings"
	"testing"
	"time"
)

// TestHelpDoubleDash: every command's -h names its flags as the docs do
// ("--addr"), never Go's single-dash form, with short durations.
func TestHelpDoubleDash(t *testing.T) {
	t.Parallel()
	for name := range commands {
		if name == "bench" {
			continue // internal/bench prints its own help (TestBenchHelpDoubleDash)
		}
		r := runCLI(t, name, "-h")
		if r.code != 0 {
			t.Fatalf("%s -h: exit %d, stderr %q", name, r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "\n  --") {
			t.Errorf("%s -h lists no --flag:\n%s", name, r.stdout)
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
				t.Errorf("%s -h: %q has the single-dash form", name, line)
			}
			if strings.Contains(line, "0m0s") {
				t.Errorf("%s -h: %q has a long duration form", name, line)
			}
		}
	}
	r := runCLI(t, "serve", "-h")
	for _, want := range []string{"\n  --addr address\n", `(default "127.0.0.1:7070")`, "(default 10y)", "(default 24h)", "(default 1MiB)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve -h lacks %q", want)
		}
	}
}

func TestBenchHelpDoubleDash(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "bench", "-h")
	if !strings.Contains(r.stderr, "\n  --target ") || strings.Contains(r.stderr, "\n  -target ") {
		t.Fatalf("bench -h:\n%s", r.stderr)
	}
}

// TestServeSizeAndDurationUnits: size flags take units, duration flags
// days and years, from flags and the environment alike.
func TestServeSizeAndDurationUnits(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DELAYQ_MAX_BODY_MEMORY": "1GB", "DELAYQ_DEDUP_WINDOW": "7d"}
	o, err := parseServe([]string{"--max-payload", "1MiB", "--max-delay", "10y"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if o.maxPayload != 1<<20 || o.maxBodyMemory != 1e9 || o.maxDelay != 87600*time.Hour || o.dedupWindow != 7*24*time.Hour {
		t.Fatalf("payload %d, body memory %d, max delay %v, dedup %v", o.maxPayload, o.maxBodyMemory, o.maxDelay, o.dedupWindow)
	}
	for _, v := range []string{"1 MiB", "1048576", "1024KiB", "1.048576MB"} {
		if o, err := parseServe([]string{"--max-payload", v}, func(string) string { return "" }); err != nil || o.maxPayload != 1<<20 {
			t.Errorf("--max-payload %q: %v %v", v, o, err)
		}
	}
	for _, v := range []string{"1XB", "MiB", "0.5", "1e3"} {
		if _, err := parseServe([]string{"--max-payload", v}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "max-payload") {
			t.Errorf("--max-payload %q: err %v", v, err)
		}
	}
	if o, err := parseServe([]string{"--max-body-memory", "-1"}, func(string) string { return "" }); err != nil || o.maxBodyMemory != -1 {
		t.Errorf("--max-body-memory -1: %v", err)
	}
}

func TestHumanAndParseDur(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 30 * time.Second: "30s", 30 * time.Minute: "30m", time.Hour: "1h",
		90 * time.Minute: "1h30m", 24 * time.Hour: "24h", 7 * day: "7d", 87600 * time.Hour: "10y",
		1500 * time.Millisecond: "1.5s",
	} {
		got := humanDur(d)
		if got != want {
			t.Errorf("humanDur(%v) = %q, want %q", d, got, want)
		}
		if back, err := parseDur(got); err != nil || back != d {
			t.Errorf("parseDur(%q) = %v, %v; want %v", got, back, err, d)
		}
	}
	if d, err := parseDur("1y2d3h"); err != nil || d != year+2*day+3*time.Hour {
		t.Errorf("1y2d3h: %v %v", d, err)
	}
	for _, bad := range []string{"", "y", "soon", "3d-1h", "99999999999y"} {
		if _, err := parseDur(bad); err == nil {
			t.Errorf("parseDur(%q) accepted", bad)
		}
	}
}

// TestGlobalFlagsBeforeCommand: "delayq --json stats" works as
// "delayq stats --json"; other flags before the command are refused.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	b.run(t, "send", "alpha", "x").ok(t)
	r := runCLI(t, "--json", "--server", b.url, "stats").ok(t)
	if !strings.HasPrefix(r.stdout, `{"topics":[`) {
		t.Fatalf("--json stats: %q", r.stdout)
	}
	r = runCLI(t, "--server="+b.url, "--timeout", "5s", "topics").ok(t)
	if r.stdout != "alpha\n" {
		t.Fatalf("topics: %q", r.stdout)
	}
	runCLI(t, "--delay", "1m", "send").failed(t, exitUsage, "delayq: flag --delay before the command")
	runCLI(t, "--server").failed(t, exitUsage, "delayq: flag --server needs a value")
	runCLI(t, "--json").failed(t, exitUsage, "delayq: no command")
}

func TestShortDurYears(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		87600 * time.Hour:           "10y",
		(2526*24 + 13) * time.Hour:  "6y336d",
		365*day + 3*time.Hour + 1e9: "1y",
	} {
		if got := shortDur(d); got != want {
			t.Errorf("shortDur(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestCLITokenSpec: a whole token spec as --token is a usage error that
// says to pass only the secret; nothing is sent.
func TestCLITokenSpec(t *testing.T) {
	t.Parallel()
	runCLI(t, "topics", "--server", "127.0.0.1:1", "--token", "billing:s3cr3t-0123456789abcdef:produce:billing.*").
		failed(t, exitUsage, "delayq topics: --token (or DELAYQ_TOKEN) is a whole NAME:SECRET:SCOPES:PATTERNS spec: pass only the SECRET part")
}

// TestCLIServerWithoutScheme: --server host:port means http://host:port.
func TestCLIServerWithoutScheme(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	b.run(t, "send", "alpha", "x").ok(t)
	if r := runCLI(t, "topics", "--server", strings.TrimPrefix(b.url, "http://")).ok(t); r.stdout != "alpha\n" {
		t.Fatalf("topics: %q", r.stdout)
	}
}
