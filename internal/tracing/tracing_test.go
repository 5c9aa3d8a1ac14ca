package tracing

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, true},
		{[]string{"OTEL_TRACES_EXPORTER", "console"}, true},
		{[]string{"OTEL_TRACES_EXPORTER", "none"}, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"}, true},
		{[]string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, false},
		{[]string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"}, false},
		{[]string{"OTEL_SDK_DISABLED", "false", "OTEL_TRACES_EXPORTER", "otlp"}, true},
		{[]string{"OTEL_SERVICE_NAME", "x"}, false}, // other OTEL_* variables alone do not turn it on
	} {
		if got := Enabled(env(c.env...)); got != c.want {
			t.Errorf("Enabled(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}

// setenv sets the OTEL_* variables for the test (others of the process
// are cleared first, so the machine's own cannot leak in).
func setenv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_BSP_SCHEDULE_DELAY"} {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

func TestOffByDefault(t *testing.T) {
	setenv(t)
	s, err := FromEnv(context.Background(), "v1", nil, slog.New(slog.DiscardHandler))
	if err != nil || s.Provider != nil || s.Exporter != "" {
		t.Fatalf("FromEnv with no OTEL_* = %+v, %v; want tracing off", s, err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestConsole: the console exporter writes the spans, with the resource's
// service name and version, when the provider shuts down.
func TestConsole(t *testing.T) {
	var out strings.Builder
	setenv(t, "OTEL_TRACES_EXPORTER", "console", "OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
	s, err := FromEnv(context.Background(), "v1.2.3", &out, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if s.Exporter != "console" || s.Provider == nil {
		t.Fatalf("setup %+v", s)
	}
	_, span := s.Provider.Tracer("test").Start(context.Background(), "hello")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"hello"`, `"Value":"delayq"`, `"Value":"v1.2.3"`, `"Value":"test"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
}

func TestOTLP(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"}, "otlp (http/protobuf)"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"}, "otlp (grpc)"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, "otlp (http/protobuf)"},
	} {
		setenv(t, c.env...)
		s, err := FromEnv(context.Background(), "v1", nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if s.Exporter != c.want || s.Provider == nil {
			t.Errorf("%v: exporter %q, want %q", c.env, s.Exporter, c.want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.Shutdown(ctx); err != nil { // nothing to export: no connection needed
			t.Errorf("%v: shutdown: %v", c.env, err)
		}
		cancel()
	}
}

func TestBadSettings(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"OTEL_TRACES_EXPORTER", "zipkin"}, `"zipkin": want otlp, console or none`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp,console"}, "give one exporter"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, `"http/json": want http/protobuf or grpc`},
	} {
		setenv(t, c.env...)
		if _, err := FromEnv(context.Background(), "v1", nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.env, err, c.want)
		}
	}
}

// lockedBuilder is a log sink the SDK's goroutines write to.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestExportErrorsAreLogged: a collector that cannot be reached shows in
// the server's log, at warn.
func TestExportErrorsAreLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	setenv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr, "OTEL_EXPORTER_OTLP_TIMEOUT", "200", "OTEL_BSP_SCHEDULE_DELAY", "10")
	var logs lockedBuilder
	s, err := FromEnv(context.Background(), "v1", nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx) // fails too: the collector is still away
	}()
	_, span := s.Provider.Tracer("test").Start(context.Background(), "lost")
	span.End()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "level=WARN msg=tracing"); {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the failed export; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
