package wire

import (
	"context"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/domain"
)

func spanCtx(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

func TestAddTraceparent(t *testing.T) {
	ctx, sc := spanCtx(t)
	const want = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if got := Traceparent(sc); got != want {
		t.Fatalf("Traceparent = %q, want %q", got, want)
	}
	if got := AddTraceparent(ctx, nil); len(got) != 1 || got[HeaderTraceparent] != want {
		t.Fatalf("no headers: %v", got)
	}
	mine := map[string]string{"k": "v"}
	got := AddTraceparent(ctx, mine)
	if len(got) != 2 || got[HeaderTraceparent] != want || got["k"] != "v" {
		t.Fatalf("with headers: %v", got)
	}
	if len(mine) != 1 {
		t.Fatalf("the caller's map was changed: %v", mine)
	}
	own := map[string]string{HeaderTraceparent: "00-11111111111111111111111111111111-2222222222222222-00"}
	if got := AddTraceparent(ctx, own); got[HeaderTraceparent] != own[HeaderTraceparent] {
		t.Fatalf("the sender's own traceparent was replaced: %v", got)
	}
	full := map[string]string{}
	for i := range domain.MaxHeaders {
		full["h"+strconv.Itoa(i)] = "x"
	}
	if got := AddTraceparent(ctx, full); len(got) != domain.MaxHeaders || got[HeaderTraceparent] != "" {
		t.Fatalf("no room for the header, yet it was added (%d headers)", len(got))
	}
	if got := AddTraceparent(context.Background(), mine); len(got) != 1 {
		t.Fatalf("without a span: %v", got)
	}
	if n := testing.AllocsPerRun(100, func() { AddTraceparent(context.Background(), mine) }); n != 0 {
		t.Fatalf("%v allocations per send without a span, want 0", n)
	}
}

func TestTraceparentSpanContext(t *testing.T) {
	_, sc := spanCtx(t)
	got := TraceparentSpanContext(map[string]string{HeaderTraceparent: Traceparent(sc)})
	if !got.IsValid() || !got.IsRemote() || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() {
		t.Fatalf("parsed %v, want %v (remote)", got, sc)
	}
	for _, bad := range []map[string]string{nil, {}, {HeaderTraceparent: "garbage"}, {HeaderTraceparent: "00-00000000000000000000000000000000-b7ad6b7169203331-01"}} {
		if got := TraceparentSpanContext(bad); got.IsValid() {
			t.Errorf("%v parsed as valid %v", bad, got)
		}
	}
}
