package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/wire"
)

// TestRequestID: every answer carries X-Request-Id: the caller's when it
// is one well-formed value, else a fresh one; error bodies and the log
// lines about the request carry the same id.
func TestRequestID(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	b := setup(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	r := b.do(t, "GET", "/healthz", "")
	want(t, r, 200)
	gen := r.header.Get(wire.HeaderRequestID)
	if len(gen) != 26 {
		t.Fatalf("generated request id %q, want a 26-character id", gen)
	}
	if r2 := b.do(t, "GET", "/healthz", ""); r2.header.Get(wire.HeaderRequestID) == gen {
		t.Fatal("two requests got the same id")
	}

	own := "req-" + strings.Repeat("x", 124) // 128 bytes: the longest taken
	r = b.do(t, "GET", "/v1/topics/t/messages/nope", "", wire.HeaderRequestID, own)
	want(t, r, 404)
	if got := r.header.Get(wire.HeaderRequestID); got != own {
		t.Fatalf("echoed %q, want the caller's %q", got, own)
	}
	if r.err.RequestID != own {
		t.Fatalf("error body request_id %q, want %q", r.err.RequestID, own)
	}

	for name, hdr := range map[string][]string{
		"too long":       {wire.HeaderRequestID, own + "y"},
		"space":          {wire.HeaderRequestID, "a b"},
		"not ASCII":      {wire.HeaderRequestID, "café"},
		"two values":     {wire.HeaderRequestID, "one", wire.HeaderRequestID, "two"},
		"empty (absent)": {wire.HeaderRequestID, ""},
	} {
		r := b.do(t, "GET", "/healthz", "", hdr...)
		if got := r.header.Get(wire.HeaderRequestID); len(got) != 26 || got == hdr[1] {
			t.Errorf("%s: answered id %q, want a fresh one", name, got)
		}
	}

	// Unmatched routes and refused hosts answer before any route runs.
	r = b.do(t, "GET", "/no/such/path", "", wire.HeaderRequestID, "unmatched-1")
	if r.status != 404 || r.err.RequestID != "unmatched-1" {
		t.Fatalf("unmatched: %d %+v", r.status, r.err)
	}
	req, err := http.NewRequest("GET", b.ts.URL+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "evil.example"
	req.Header.Set(wire.HeaderRequestID, "host-1")
	r = b.roundTrip(t, req)
	if r.status != 403 || r.err.RequestID != "host-1" || r.header.Get(wire.HeaderRequestID) != "host-1" {
		t.Fatalf("refused host: %d %+v %v", r.status, r.err, r.header)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{gen, own, "unmatched-1", "host-1"} {
		if !strings.Contains(logs.String(), "request_id="+id) {
			t.Errorf("no log line with request_id=%s:\n%s", id, logs.String())
		}
	}
}

// TestRequestIDInFailureLog: a 500's log line names the request's id.
func TestRequestIDInFailureLog(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	srv, err := New(Config{Queue: panicQueue{}, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://127.0.0.1/v1/topics", nil)
	req.Header.Set(wire.HeaderRequestID, "boom-1")
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"request_id":"boom-1"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "panic serving request") || !strings.Contains(logs.String(), "request_id=boom-1") {
		t.Fatalf("the panic's log line lacks the request id: %s", logs.String())
	}
}

func TestIncomingRequestID(t *testing.T) {
	for v, ok := range map[string]bool{
		"abc": true, "A-1_b.c:d/e=f": true, strings.Repeat("z", 128): true,
		"": false, strings.Repeat("z", 129): false, "a b": false, "a\x01b": false, "a\x7fb": false, "caf\xc3\xa9": false, "a\tb": false,
	} {
		got := incomingRequestID(http.Header{wire.HeaderRequestID: {v}})
		if (ok && got != v) || (!ok && got != "") {
			t.Errorf("incomingRequestID(%q) = %q, want taken: %v", v, got, ok)
		}
	}
}

func TestHealthzVersion(t *testing.T) {
	b := setup(t, func(c *Config) { c.Version, c.Revision = "v1.2.3", "0123456789ab+dirty" })
	r := b.do(t, "GET", "/healthz", "")
	want(t, r, 200)
	if h := into[wire.HealthResponse](t, r); h != (wire.HealthResponse{Status: "ok", Version: "v1.2.3", Revision: "0123456789ab+dirty"}) {
		t.Fatalf("healthz %+v", h)
	}
}

func TestMetricLabels(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "POST": "POST", "PATCH": "PATCH", "FOO": "OTHER", "get": "OTHER", "": "OTHER"} {
		if got := metricMethod(in); got != want {
			t.Errorf("metricMethod(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"POST /v1/topics/{topic}/messages": "/v1/topics/{topic}/messages",
		"GET /":                            "/",
		"/ui/":                             "/ui/",
		"unmatched":                        "unmatched",
		"refused host":                     "refused host",
	} {
		if got := routePath(in); got != want {
			t.Errorf("routePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// recordingObserver keeps the labels ObserveRequest got.
type recordingObserver struct {
	mu  sync.Mutex
	got []string
}

func (o *recordingObserver) ObserveRequest(method, route string, code int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, fmt.Sprintf("%s %s %d", method, route, code))
}
func (o *recordingObserver) RequestStarted() {}
func (o *recordingObserver) RequestDone()    {}

// TestObserverLabels: the method is its own label, from a fixed set, and
// the route is the pattern's path.
func TestObserverLabels(t *testing.T) {
	o := &recordingObserver{}
	b := setup(t, func(c *Config) { c.RequestObserver = o })
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"payload":"x"}`), 201)
	b.do(t, "BREW", "/v1/topics/t/messages", "")
	b.do(t, "GET", "/nowhere", "")
	o.mu.Lock()
	defer o.mu.Unlock()
	wantGot := []string{"POST /v1/topics/{topic}/messages 201", "OTHER unmatched 405", "GET unmatched 404"}
	if !slices.Equal(o.got, wantGot) {
		t.Fatalf("observed %q, want %q", o.got, wantGot)
	}
}

const producerTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestTracing: with a TracerProvider each request gets a server span that
// continues the caller's traceparent, and sent messages without a
// traceparent header get one naming that span.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b := setup(t, func(c *Config) { c.TracerProvider = tp })
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"a","payload":"x"}`, "traceparent", producerTraceparent, wire.HeaderRequestID, "trace-1"), 201)
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"own","payload":"x","headers":{"traceparent":"00-11111111111111111111111111111111-2222222222222222-01"}}`, "traceparent", producerTraceparent), 201)
	want(t, b.do(t, "POST", "/v1/topics/t/messages:batch", `{"messages":[{"id":"b1","payload":"x"},{"id":"b2","payload":"x","headers":{"k":"v"}}]}`), 200)

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	s := spans[0]
	if s.Name() != "POST /v1/topics/{topic}/messages" || s.SpanKind() != trace.SpanKindServer {
		t.Fatalf("span %q kind %v", s.Name(), s.SpanKind())
	}
	if s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.Parent().SpanID().String() != "b7ad6b7169203331" || !s.Parent().IsRemote() {
		t.Fatalf("span does not continue the caller's trace: trace %s parent %s", s.SpanContext().TraceID(), s.Parent().SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{"http.request.method": "POST", "http.route": "/v1/topics/{topic}/messages", "http.response.status_code": "201", "delayq.request_id": "trace-1"} {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}

	ctx := context.Background()
	header := func(id string) map[string]string {
		m, err := b.eng.Get(ctx, "t", id)
		if err != nil {
			t.Fatal(err)
		}
		return m.Headers
	}
	if got, want := header("a")["traceparent"], wire.Traceparent(s.SpanContext()); got != want {
		t.Errorf("message a traceparent %q, want the server span's %q", got, want)
	}
	if got := header("own")["traceparent"]; got != "00-11111111111111111111111111111111-2222222222222222-01" {
		t.Errorf("the sender's own traceparent was replaced: %q", got)
	}
	batchSpan := spans[2].SpanContext()
	for _, id := range []string{"b1", "b2"} {
		if got := header(id)["traceparent"]; got != wire.Traceparent(batchSpan) {
			t.Errorf("batch item %s traceparent %q, want %q", id, got, wire.Traceparent(batchSpan))
		}
	}
	if header("b2")["k"] != "v" {
		t.Error("the item's own headers were lost")
	}
}

// TestNoTracingByDefault: without a TracerProvider the request's
// traceparent is not copied into the message.
func TestNoTracingByDefault(t *testing.T) {
	b := setup(t, nil)
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"a","payload":"x"}`, "traceparent", producerTraceparent), 201)
	m, err := b.eng.Get(context.Background(), "t", "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Headers) != 0 {
		t.Fatalf("headers %v, want none", m.Headers)
	}
}
