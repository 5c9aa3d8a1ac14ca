package wire

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/domain"
)

// HeaderTraceparent is the message header that carries the W3C Trace
// Context traceparent of the span that sent the message, so the span that
// handles it, maybe days later, can link to it.
const HeaderTraceparent = "traceparent"

// AddTraceparent returns h with a traceparent header holding ctx's span
// context, when ctx has a valid one and h has no traceparent yet. h itself
// is never changed (it is the caller's): a copy is made. Without a span, or
// when the header would break the header limits, h is returned as it is:
// tracing never makes a send fail. Without a span it costs a context
// lookup and allocates nothing.
func AddTraceparent(ctx context.Context, h map[string]string) map[string]string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return h
	}
	if _, ok := h[HeaderTraceparent]; ok {
		return h
	}
	out := make(map[string]string, len(h)+1)
	maps.Copy(out, h)
	out[HeaderTraceparent] = Traceparent(sc)
	if domain.ValidateHeaders(out) != nil {
		return h
	}
	return out
}

// Traceparent formats sc as a W3C traceparent value (version 00).
func Traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// TraceparentSpanContext parses a message's traceparent header: the
// remote span context it names, or an invalid one when there is none or
// it is malformed.
func TraceparentSpanContext(h map[string]string) trace.SpanContext {
	if h[HeaderTraceparent] == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{HeaderTraceparent: h[HeaderTraceparent]})
	return trace.SpanContextFromContext(ctx)
}
