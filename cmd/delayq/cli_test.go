package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/wire"
)

// cliBundle is a real server (engine + memstore) for the CLI to talk to.
type cliBundle struct {
	url string
	eng *engine.Engine
}

func setupCLI(t *testing.T) *cliBundle {
	t.Helper()
	return setupCLIWrapped(t, nil)
}

// setupCLIWrapped is setupCLI with the server's handler wrapped by wrap
// (nil: as it is), for tests that watch the calls the CLI makes.
func setupCLIWrapped(t *testing.T, wrap func(http.Handler) http.Handler) *cliBundle {
	t.Helper()
	ctx := context.Background()
	eng, err := engine.Open(ctx, engine.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Queue: eng, Scheduler: eng, Admin: eng})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		eng.Close(ctx)
	})
	return &cliBundle{url: ts.URL, eng: eng}
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs the CLI with --server last, which also exercises flags after
// positional arguments.
func (b *cliBundle) run(t *testing.T, args ...string) result {
	t.Helper()
	return runCLI(t, append(args, "--server", b.url)...)
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q, stdout %q", r.code, r.stderr, r.stdout)
	}
	return r
}

// failed checks the exit code and that stderr is one line starting with prefix.
func (r result) failed(t *testing.T, code int, prefix string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d (stderr %q)", r.code, code, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, prefix) || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("stderr %q: want one line starting with %q", r.stderr, prefix)
	}
	if r.stdout != "" {
		t.Fatalf("stdout %q on failure", r.stdout)
	}
}

// hasRow checks that a "key  value" block has the row, aligned with the others.
func hasRow(t *testing.T, out, key, value string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	col := strings.IndexFunc(strings.TrimPrefix(lines[0], strings.Fields(lines[0])[0]), func(r rune) bool { return r != ' ' }) + len(strings.Fields(lines[0])[0])
	for _, l := range lines {
		if strings.HasPrefix(l, key+" ") && len(l) > col && strings.TrimSpace(l[:col]) == key && l[col:] == value {
			return
		}
	}
	t.Errorf("no aligned row %q = %q in:\n%s", key, value, out)
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

func TestCLISendGetCancel(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	r := b.run(t, "send", "orders", "order 42", "--delay", "30m", "--id", "order-42",
		"--header", "tenant=acme", "--header", "src=web", "--max-attempts", "3").ok(t)
	if !regexp.MustCompile(`^sent orders/order-42: scheduled, due in 30m \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\)\n$`).MatchString(r.stdout) {
		t.Fatalf("send output %q", r.stdout)
	}

	r = b.run(t, "send", "orders", "again", "--id", "order-42").ok(t)
	if !strings.HasPrefix(r.stdout, "duplicate orders/order-42: already scheduled") {
		t.Fatalf("duplicate output %q", r.stdout)
	}

	r = b.run(t, "get", "orders", "order-42").ok(t)
	for _, row := range [][2]string{
		{"topic", "orders"}, {"id", "order-42"}, {"state", "scheduled"},
		{"failures", "0 of 3"}, {"headers", "src=web tenant=acme"}, {"payload", "order 42"},
	} {
		hasRow(t, r.stdout, row[0], row[1])
	}
	if !regexp.MustCompile(`deliver at +in (29m59s|30m) `).MatchString(r.stdout) {
		t.Errorf("get output has no relative due time:\n%s", r.stdout)
	}

	r = b.run(t, "get", "orders", "order-42", "--json").ok(t)
	m := decodeJSON[wire.Message](t, r.stdout)
	if m.ID != "order-42" || *m.Payload != "order 42" || m.MaxAttempts != 3 || m.Headers["tenant"] != "acme" || m.State != "scheduled" {
		t.Fatalf("get --json %+v", m)
	}

	r = b.run(t, "cancel", "orders", "order-42").ok(t)
	if !strings.HasPrefix(r.stdout, "cancelled orders/order-42 (was scheduled, due in ") {
		t.Fatalf("cancel output %q", r.stdout)
	}
	b.run(t, "cancel", "orders", "order-42").failed(t, exitRequest, "delayq cancel: message orders/order-42 not found\n")
	b.run(t, "get", "orders", "order-42").failed(t, exitRequest, "delayq get: message orders/order-42 not found\n")
}

func TestCLISendJSONAndStdin(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	stdin = strings.NewReader("from stdin\n")
	t.Cleanup(func() { stdin = os.Stdin })
	r := b.run(t, "send", "--json", "jobs", "-", "--at", "2031-05-06T07:08:09.5Z").ok(t)
	m := decodeJSON[wire.Message](t, r.stdout)
	if *m.Payload != "from stdin\n" || !m.DeliverAt.Equal(time.Date(2031, 5, 6, 7, 8, 9, 5e8, time.UTC)) || m.ID == "" {
		t.Fatalf("send --json %+v", m)
	}
	r = b.run(t, "reschedule", "jobs", m.ID, "--at", "2032-01-01T00:00:00Z", "--json").ok(t)
	m2 := decodeJSON[wire.Message](t, r.stdout)
	if !m2.DeliverAt.Equal(time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("reschedule --json %+v", m2)
	}
	r = b.run(t, "reschedule", "jobs", m.ID, "--delay", "1h").ok(t)
	if !regexp.MustCompile(`^rescheduled jobs/\S+: scheduled, due in 1h `).MatchString(r.stdout) {
		t.Fatalf("reschedule output %q", r.stdout)
	}
}

func TestCLIConsume(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	b.run(t, "send", "work", "first", "--id", "w1").ok(t)
	b.run(t, "send", "work", "second", "--id", "w2").ok(t)
	b.run(t, "send", "work", "third", "--id", "w3").ok(t)

	r := b.run(t, "consume", "work", "--count", "2", "--wait", "1s").ok(t)
	if r.stdout != "w1  attempt 1  first\nw2  attempt 1  second\n" {
		t.Fatalf("consume output %q", r.stdout)
	}
	r = b.run(t, "consume", "work", "--count", "1", "--no-ack", "--lease", "1m", "--json").ok(t)
	m := decodeJSON[wire.Message](t, r.stdout)
	if m.ID != "w3" || m.Receipt == "" || m.LeaseExpiresAt == nil {
		t.Fatalf("consume --json %+v", m)
	}

	r = b.run(t, "stats", "work", "--json").ok(t)
	tp := decodeJSON[wire.Topic](t, r.stdout)
	if tp.Counts != (wire.Counts{Inflight: 1}) {
		t.Fatalf("after consume: %+v (w1, w2 acked; w3 leased, not acked)", tp.Counts)
	}
}

func TestCLIConsumeExec(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	b.run(t, "send", "jobs", "good", "--id", "ok1").ok(t)
	b.run(t, "send", "jobs", "bad", "--id", "bad1").ok(t)
	r := b.run(t, "consume", "jobs", "--count", "2", "--wait", "1s",
		"--exec", `cat; echo " $DELAYQ_TOPIC/$DELAYQ_ID#$DELAYQ_ATTEMPT"; [ "$DELAYQ_ID" = ok1 ] || { echo "no good" >&2; exit 3; }`)
	if r.code != 0 || r.stdout != "good jobs/ok1#1\nbad jobs/bad1#1\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "delayq consume: jobs/bad1: exec: exit status 3: no good; nacked") {
		t.Fatalf("stderr %q", r.stderr)
	}
	r = b.run(t, "get", "jobs", "bad1", "--json").ok(t)
	if m := decodeJSON[wire.Message](t, r.stdout); m.Failures != 1 || m.LastError != "exec: exit status 3: no good" {
		t.Fatalf("nacked message %+v", m)
	}
	r = b.run(t, "get", "jobs", "ok1", "--json").ok(t)
	if m := decodeJSON[wire.Message](t, r.stdout); m.State != "acked" {
		t.Fatalf("acked message %+v", m)
	}
}

func TestCLIStatsAndTopics(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	b.run(t, "send", "alpha", "x", "--delay", "1h").ok(t)
	b.run(t, "send", "alpha", "y").ok(t)
	b.run(t, "send", "beta", "z", "--delay", "90m").ok(t)

	r := b.run(t, "topics").ok(t)
	if r.stdout != "alpha\nbeta\n" {
		t.Fatalf("topics %q", r.stdout)
	}
	r = b.run(t, "stats").ok(t)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TOPIC  SCHEDULED  READY  INFLIGHT  DEAD  NEXT DUE") ||
		!regexp.MustCompile(`^alpha  1 +1 +0 +0 +in (59m59s|1h) +(now|\ds ago)$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^beta +1 +0 +0 +0 +in (1h29m59s|1h30m) +-$`).MatchString(lines[2]) {
		t.Fatalf("stats table:\n%s", r.stdout)
	}
	r = b.run(t, "stats", "--json").ok(t)
	if tr := decodeJSON[wire.TopicsResponse](t, r.stdout); len(tr.Topics) != 2 || tr.Topics[0].Counts.Ready != 1 {
		t.Fatalf("stats --json %+v", tr)
	}
	r = b.run(t, "stats", "alpha").ok(t)
	for _, row := range [][2]string{{"topic", "alpha"}, {"scheduled", "1"}, {"ready", "1"}, {"max attempts", "25"}, {"lease", "30s"}} {
		hasRow(t, r.stdout, row[0], row[1])
	}
	b.run(t, "stats", "nope").failed(t, exitRequest, "delayq stats: topic nope not found\n")
}

func TestCLIDead(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	ctx := context.Background()
	for _, id := range []string{"d1", "d2", "d3"} {
		b.run(t, "send", "dlq", "x", "--id", id, "--max-attempts", "1").ok(t)
	}
	msgs, err := b.eng.Lease(ctx, "dlq", delayq.LeaseRequest{Max: 3})
	if err != nil || len(msgs) != 3 {
		t.Fatal(msgs, err)
	}
	for _, m := range msgs {
		if _, err := b.eng.Nack(ctx, "dlq", m.ID, m.Receipt, delayq.NackRequest{Reason: "boom " + m.ID}); err != nil {
			t.Fatal(err)
		}
	}
	r := b.run(t, "dead", "list", "dlq").ok(t)
	if !regexp.MustCompile(`^ID +FAILURES +DIED +LAST ERROR\nd1 +1 +(now|\ds ago) +boom d1\nd2 .*\nd3 .*boom d3\n$`).MatchString(r.stdout) {
		t.Fatalf("dead list:\n%s", r.stdout)
	}
	r = b.run(t, "dead", "list", "dlq", "--limit", "2", "--json").ok(t)
	page := decodeJSON[wire.DeadPage](t, r.stdout)
	if len(page.Messages) != 2 || page.Next == "" {
		t.Fatalf("dead list --json %+v", page)
	}
	r = b.run(t, "dead", "list", "dlq", "--limit", "2").ok(t)
	if !strings.HasSuffix(r.stdout, "more: delayq dead list dlq --cursor "+page.Next+"\n") {
		t.Fatalf("no next-page hint:\n%s", r.stdout)
	}

	r = b.run(t, "dead", "replay", "dlq", "d1").ok(t)
	if !strings.HasPrefix(r.stdout, "replayed dlq/d1: ready") {
		t.Fatalf("replay %q", r.stdout)
	}
	r = b.run(t, "dead", "purge", "dlq", "d2").ok(t)
	if r.stdout != "purged dlq/d2\n" {
		t.Fatalf("purge one %q", r.stdout)
	}
	r = b.run(t, "dead", "replay", "dlq", "--all", "--json").ok(t)
	if c := decodeJSON[wire.CountResponse](t, r.stdout); c.Count != 1 {
		t.Fatalf("replay all %+v", c)
	}
	r = b.run(t, "dead", "purge", "dlq", "--all").ok(t)
	if r.stdout != "purged 0 dead messages of dlq\n" {
		t.Fatalf("purge all %q", r.stdout)
	}
	b.run(t, "dead", "purge", "dlq", "d2").failed(t, exitRequest, "delayq dead: dead message dlq/d2 not found\n")
}

func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"send"}, "delayq send: missing arguments; usage: delayq send TOPIC"},
		{[]string{"send", "t", "p", "extra"}, "delayq send: too many arguments"},
		{[]string{"send", "t", "--delay", "soon"}, `delayq send: invalid delay: "soon" is not a duration`},
		{[]string{"send", "t", "--delay", "-5m"}, "delayq send: invalid delay: -5m is negative"},
		{[]string{"send", "t", "--delay", "1m", "--at", "2030-01-01T00:00:00Z"}, "delayq send: give --delay or --at, not both"},
		{[]string{"send", "t", "--at", "tomorrow"}, `delayq send: invalid at: "tomorrow" is not an RFC 3339 time`},
		{[]string{"send", "t", "--header", "novalue"}, `delayq send: invalid value "novalue" for flag --header`},
		{[]string{"send", "t", "--bogus"}, "delayq send: flag provided but not defined: --bogus"},
		{[]string{"reschedule", "t", "id"}, "delayq reschedule: give --delay or --at"},
		{[]string{"get", "t"}, "delayq get: missing arguments"},
		{[]string{"consume", "t", "--max", "0"}, "delayq consume: --max must be between 1 and 1000"},
		{[]string{"dead", "explode", "t"}, `delayq dead: unknown action "explode"`},
		{[]string{"dead", "replay", "t"}, "delayq dead: replay needs an ID or --all"},
		{[]string{"dead", "purge", "t", "id", "--all"}, "delayq dead: purge needs an ID or --all"},
		{[]string{"topics", "extra"}, "delayq topics: too many arguments"},
	}
	for _, tt := range tests {
		b.run(t, tt.args...).failed(t, exitUsage, tt.want)
	}
	runCLI(t, "get", "t", "id", "--server", "ftp://localhost:7070").failed(t, exitUsage, "delayq get: --server: server URL \"ftp://localhost:7070\"")
	// Invalid input caught by the server is a request error, with its field.
	b.run(t, "send", "bad topic!", "x").failed(t, exitRequest, "delayq send: invalid topic: ")
}

func TestCLIUnreachableServer(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(nil)
	url := ts.URL
	ts.Close()
	runCLI(t, "get", "t", "id", "--server", url, "--timeout", "2s").
		failed(t, exitRequest, "delayq get: cannot reach the server at "+url+": ")
}

func TestCLIHelpAndEnv(t *testing.T) {
	b := setupCLI(t) // not parallel: sets the environment
	r := runCLI(t, "send", "-h").ok(t)
	if !strings.HasPrefix(r.stdout, "Usage: delayq send TOPIC [PAYLOAD|-]") || !strings.Contains(r.stdout, "\n  --delay duration") {
		t.Fatalf("help:\n%s", r.stdout)
	}
	t.Setenv("DELAYQ_SERVER", b.url)
	t.Setenv("DELAYQ_JSON", "true")
	r = runCLI(t, "send", "envtopic", "hi", "--id", "e1").ok(t)
	if m := decodeJSON[wire.Message](t, r.stdout); m.ID != "e1" {
		t.Fatalf("env: %+v", m)
	}
	t.Setenv("DELAYQ_TIMEOUT", "soon")
	runCLI(t, "topics").failed(t, exitUsage, `delayq topics: DELAYQ_TIMEOUT="soon"`)
}

func TestParseInterleavedDoubleDash(t *testing.T) {
	t.Parallel()
	c := newCLI("send", "send", &bytes.Buffer{}, &bytes.Buffer{})
	id := c.fs.String("id", "", "")
	pos, _, ok := c.parse([]string{"t", "--id", "x", "--", "--not-a-flag"}, 0, -1)
	if !ok || *id != "x" || strings.Join(pos, ",") != "t,--not-a-flag" {
		t.Fatalf("pos %q id %q ok %v", pos, *id, ok)
	}
}

func TestShortDur(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond:               "1s",
		29*time.Minute + 59*time.Second + 999: "29m59s",
		30 * time.Minute:                      "30m",
		2*time.Hour + 30*time.Minute:          "2h30m",
		time.Hour:                             "1h",
		49 * time.Hour:                        "2d1h",
		72 * time.Hour:                        "3d",
	} {
		if got := shortDur(d); got != want {
			t.Errorf("shortDur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestRelTimeRounds(t *testing.T) {
	base := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		30*time.Minute - 3*time.Millisecond: "in 30m", // a 30m delay read back 3 ms later
		1600 * time.Millisecond:             "in 2s",
		400 * time.Millisecond:              "now",
		-400 * time.Millisecond:             "now",
		-90*time.Second + time.Millisecond:  "1m30s ago",
	} {
		if got := relTimeAt(base.Add(d), base); got != want {
			t.Errorf("relTime(now%+v) = %q, want %q", d, got, want)
		}
	}
}

// TestHealth: the probe exits 0 on a ready server and 1 with the reason
// when nothing answers.
func TestHealth(t *testing.T) {
	line, stop := startServe(t, []string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "info", "--no-dashboard"})
	base := serveURL(t, line)
	var out, errs bytes.Buffer
	if code := runHealth(context.Background(), []string{"--server", base, "--timeout", "5s"}, &out, &errs); code != exitOK || strings.TrimSpace(out.String()) != "ready" {
		t.Fatalf("ready server: exit %d, %q %q", code, out.String(), errs.String())
	}
	if code, stderr := stop(); code != 0 {
		t.Fatalf("serve exit %d: %s", code, stderr)
	}
	out.Reset()
	errs.Reset()
	if code := runHealth(context.Background(), []string{"--server", base, "--timeout", "2s"}, &out, &errs); code != exitRequest || !strings.Contains(errs.String(), "not ready") {
		t.Fatalf("stopped server: exit %d, %q %q", code, out.String(), errs.String())
	}
}
