package httpapi

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/wire"
)

// tracerName is the instrumentation scope of the server's spans.
const tracerName = "github.com/delayq/delayq/internal/httpapi"

// maxRequestIDBytes bounds an X-Request-Id taken from the caller.
const maxRequestIDBytes = 128

// incomingRequestID returns the caller's X-Request-Id when there is exactly
// one and it is 1 to 128 visible ASCII characters (no spaces or control
// characters, so it is safe in any log format), else "".
func incomingRequestID(h http.Header) string {
	v := h[wire.HeaderRequestID]
	if len(v) != 1 || len(v[0]) == 0 || len(v[0]) > maxRequestIDBytes {
		return ""
	}
	for i := 0; i < len(v[0]); i++ {
		if c := v[0][i]; c <= ' ' || c > '~' {
			return ""
		}
	}
	return v[0]
}

// requestID is the id serveHTTP gave the request that w answers: it sets
// the response header before anything else runs.
func requestID(w http.ResponseWriter) string { return w.Header().Get(wire.HeaderRequestID) }

// metricMethod is the request's method for metrics and span names: one of
// the standard methods, else "OTHER", so a client inventing methods cannot
// grow the label set.
func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// routePath is a route's pattern without its method: "POST
// /v1/topics/{topic}/messages" becomes "/v1/topics/{topic}/messages";
// fixed names ("unmatched", "/ui/") stay as they are.
func routePath(pattern string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 && strings.HasPrefix(pattern[i+1:], "/") {
		return pattern[i+1:]
	}
	return pattern
}

// startSpan starts the request's server span, continuing the caller's
// trace context. Called only with tracing on.
func (s *Server) startSpan(r *http.Request, id string) (*http.Request, trace.Span) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, metricMethod(r.Method), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", metricMethod(r.Method)),
			attribute.String("url.path", r.URL.Path),
			attribute.String("delayq.request_id", id),
		))
	return r.WithContext(ctx), span
}

// endSpan names the span after its route, as the HTTP semantic
// conventions ask ("POST /v1/topics/{topic}/messages"), and records the
// answer.
func endSpan(span trace.Span, method, route string, code int) {
	if strings.HasPrefix(route, "/") {
		span.SetName(method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	}
	span.SetAttributes(attribute.Int("http.response.status_code", code))
	if code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	span.End()
}

// withTraceparent gives a message sent under a span the span's context in
// its headers (wire.AddTraceparent). Only with tracing on.
func (s *Server) withTraceparent(ctx context.Context, h map[string]string) map[string]string {
	if s.tracer == nil {
		return h
	}
	return wire.AddTraceparent(ctx, h)
}
