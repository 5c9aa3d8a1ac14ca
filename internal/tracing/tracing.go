// Package tracing turns on OpenTelemetry tracing for `delayq serve` when
// the standard OTEL_* environment variables ask for it, and leaves it off
// (no tracer at all, so nothing is spent per request) otherwise.
//
// Tracing is on when OTEL_TRACES_EXPORTER names an exporter other than
// "none", or when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), unless OTEL_SDK_DISABLED is "true".
// The exporters are those of the OpenTelemetry specification:
//
//   - otlp (the default once tracing is on), over http/protobuf unless
//     OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL says
//     grpc; the exporter reads its own endpoint, headers, TLS and timeout
//     variables;
//   - console: spans as JSON on the given writer (standard output), for
//     trying it out.
//
// The SDK reads OTEL_TRACES_SAMPLER (and _ARG), the batch processor's
// OTEL_BSP_* and the resource's OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES; service.name defaults to "delayq".
//
// This is the subset of the contrib autoexport package's span exporters
// that a server needs, without its metric and log exporters (and their
// dependencies), and off by default where autoexport defaults to otlp.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Setup is tracing as the environment configures it.
type Setup struct {
	// Provider makes the spans; nil when tracing is off.
	Provider *sdktrace.TracerProvider
	// Exporter names the exporter ("otlp (http/protobuf)", "console"), for
	// the start-up log; "" when off.
	Exporter string
}

// Shutdown flushes the spans not yet exported and stops the provider.
func (s *Setup) Shutdown(ctx context.Context) error {
	if s == nil || s.Provider == nil {
		return nil
	}
	return s.Provider.Shutdown(ctx)
}

// Enabled reports whether the environment asks for tracing.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp != "" {
		return exp != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv sets tracing up as the process's environment says (see the
// package doc; the SDK and the exporters read it too): a Setup with a nil
// Provider when tracing is off. version is the resource's
// service.version; console is where the console exporter writes. With
// tracing on, the SDK's own errors (an unreachable collector, say) go to
// log at warn, instead of the standard logger's unstructured lines.
func FromEnv(ctx context.Context, version string, console io.Writer, log *slog.Logger) (*Setup, error) {
	if !Enabled(os.Getenv) {
		return &Setup{}, nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	exp, name, err := newExporter(ctx, os.Getenv, console)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "delayq"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx) // the resource error is the one to report
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// A partial resource (a malformed OTEL_RESOURCE_ATTRIBUTES entry) is
	// used as it is, as the SDK itself does.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Setup{Provider: tp, Exporter: name}, nil
}

func newExporter(ctx context.Context, getenv func(string) string, console io.Writer) (sdktrace.SpanExporter, string, error) {
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
		proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
		if proto == "" {
			proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
		}
		var e sdktrace.SpanExporter
		var err error
		switch proto {
		case "", "http/protobuf":
			proto = "http/protobuf"
			e, err = otlptracehttp.New(ctx)
		case "grpc":
			e, err = otlptracegrpc.New(ctx)
		default:
			return nil, "", fmt.Errorf("tracing: OTLP protocol %q: want http/protobuf or grpc", proto)
		}
		if err != nil {
			return nil, "", fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
		return e, "otlp (" + proto + ")", nil
	case "console":
		e, err := stdouttrace.New(stdouttrace.WithWriter(console))
		if err != nil {
			return nil, "", fmt.Errorf("tracing: console exporter: %w", err)
		}
		return e, "console", nil
	default:
		if strings.Contains(exp, ",") {
			return nil, "", errors.New("tracing: OTEL_TRACES_EXPORTER: give one exporter (otlp, console or none)")
		}
		return nil, "", fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q: want otlp, console or none", exp)
	}
}
