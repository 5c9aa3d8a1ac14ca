package delayq_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/httpapi"
)

// traced is a Client and a real server (tracing on when tp is set) on an
// engine with a memstore.
func traced(t *testing.T, tp trace.TracerProvider) *delayq.Client {
	t.Helper()
	eng := newEngine(t)
	cfg := httpapi.Config{Queue: eng, Ready: eng.Ready, Logger: quiet}
	if tp != nil {
		cfg.TracerProvider = tp
	}
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	c, err := delayq.NewClient(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handleOne runs a Worker (with tp, when set) until it has handled one
// message of topic, and returns the span context its handler's ctx had
// and the message.
func handleOne(t *testing.T, q delayq.Queue, topic string, tp trace.TracerProvider) (trace.SpanContext, *delayq.Message) {
	t.Helper()
	type handled struct {
		sc trace.SpanContext
		m  *delayq.Message
	}
	got := make(chan handled, 1)
	cfg := delayq.WorkerConfig{Concurrency: 1, Lease: 5 * time.Second, Wait: time.Second, Logger: quiet}
	if tp != nil {
		cfg.TracerProvider = tp
	}
	w := delayq.NewWorker(q, cfg)
	w.HandleFunc(topic, func(ctx context.Context, m *delayq.Message) error {
		select {
		case got <- handled{trace.SpanContextFromContext(ctx), m}:
		default:
		}
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	select {
	case h := <-got:
		return h.sc, h.m
	case <-time.After(10 * time.Second):
		t.Fatal("the worker handled nothing")
	}
	return trace.SpanContext{}, nil
}

// TestTraceSurvivesTheDelay: a send made under a span carries the span's
// traceparent in the message's headers (through the Client and the
// server), and the Worker's handler span, a new trace, links to the
// producer's span.
func TestTraceSurvivesTheDelay(t *testing.T) {
	t.Parallel()
	for _, serverTracing := range []bool{false, true} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		var serverTP trace.TracerProvider
		if serverTracing {
			serverTP = tp
		}
		c := traced(t, serverTP)
		ctx, producer := tp.Tracer("producer").Start(context.Background(), "checkout")
		if _, err := c.Enqueue(ctx, "orders", []byte("x"), delayq.After(50*time.Millisecond), delayq.WithID("o1")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendBatch(ctx, "orders", []delayq.SendRequest{{ID: "o2", Payload: []byte("y"), Headers: map[string]string{"k": "v"}}}); err != nil {
			t.Fatal(err)
		}
		producer.End()
		psc := producer.SpanContext()
		for _, id := range []string{"o1", "o2"} {
			m, err := c.Get(context.Background(), "orders", id)
			if err != nil {
				t.Fatal(err)
			}
			if want := "00-" + psc.TraceID().String() + "-" + psc.SpanID().String() + "-01"; m.Headers["traceparent"] != want {
				t.Fatalf("server tracing %v: message %s traceparent %q, want the producer's %q", serverTracing, id, m.Headers["traceparent"], want)
			}
		}

		hsc, m := handleOne(t, c, "orders", tp)
		if !hsc.IsValid() || hsc.TraceID() == psc.TraceID() {
			t.Fatalf("handler span context %v: want a valid one in a new trace", hsc)
		}
		var handler sdktrace.ReadOnlySpan
		sendSpans := 0
		for _, s := range rec.Ended() {
			if s.SpanContext().SpanID() == hsc.SpanID() {
				handler = s
			}
			if name := s.Name(); name == "POST /v1/topics/{topic}/messages" || name == "POST /v1/topics/{topic}/messages:batch" {
				sendSpans++
				if s.Parent().SpanID() != psc.SpanID() {
					t.Errorf("server span %q is not a child of the producer's span", name)
				}
			}
		}
		if want := map[bool]int{false: 0, true: 2}[serverTracing]; sendSpans != want {
			t.Errorf("server tracing %v: %d send spans, want %d", serverTracing, sendSpans, want)
		}
		if handler == nil {
			t.Fatal("the handler's span was not recorded")
		}
		if handler.Name() != "process orders" || handler.SpanKind() != trace.SpanKindConsumer || handler.Parent().IsValid() {
			t.Errorf("handler span %q kind %v parent %v", handler.Name(), handler.SpanKind(), handler.Parent())
		}
		links := handler.Links()
		if len(links) != 1 || links[0].SpanContext.TraceID() != psc.TraceID() || links[0].SpanContext.SpanID() != psc.SpanID() {
			t.Fatalf("handler span links %+v, want one to the producer's span %v", links, psc)
		}
		if m.Headers["traceparent"] == "" {
			t.Error("the handled message lost its traceparent")
		}
		_ = tp.Shutdown(context.Background())
	}
}

// TestNoTracingNoHeader: without a span in ctx (no SDK, or a no-op
// provider), nothing is added to the message and a Worker without a
// TracerProvider records nothing.
func TestNoTracingNoHeader(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := traced(t, nil)
	noopCtx, span := noop.NewTracerProvider().Tracer("x").Start(context.Background(), "noop")
	defer span.End()
	for i, ctx := range []context.Context{context.Background(), noopCtx} {
		id := []string{"plain", "noop"}[i]
		if _, err := c.Enqueue(ctx, "t", []byte("x"), delayq.WithID(id)); err != nil {
			t.Fatal(err)
		}
		m, err := c.Get(ctx, "t", id)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Headers) != 0 {
			t.Fatalf("%s: headers %v, want none", id, m.Headers)
		}
	}
	sc, _ := handleOne(t, c, "t", nil)
	if sc.IsValid() {
		t.Errorf("the handler's ctx has a span %v without a TracerProvider", sc)
	}
	if n := len(rec.Started()); n != 0 {
		t.Errorf("%d spans recorded with tracing off", n)
	}
	_ = tp.Shutdown(context.Background())
}

// TestAPIErrorRequestID: an error answer's request id reaches the caller.
func TestAPIErrorRequestID(t *testing.T) {
	t.Parallel()
	c := traced(t, nil)
	_, err := c.Get(context.Background(), "t", "missing")
	var ae *delayq.APIError
	if !errors.As(err, &ae) || len(ae.RequestID) != 26 {
		t.Fatalf("error %#v: want an *APIError with the server's 26-character request id", err)
	}
}
