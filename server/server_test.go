package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestNewRefuses: a Config New cannot run is refused before anything is
// opened.
func TestNewRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	for _, tc := range []struct {
		name string
		cfg  server.Config
		msg  string
	}{
		{"no store", server.Config{}, "names no store"},
		{"two stores", server.Config{RedisURL: "redis://127.0.0.1:1/0", PostgresURL: "postgres://x@127.0.0.1:1/db"}, "only one of"},
		{"exposed without tokens", server.Config{DataDir: dir, Addr: "0.0.0.0:7070"}, "without authentication"},
		{"debug not on loopback", server.Config{DataDir: dir, DebugAddr: "0.0.0.0:6060"}, `DebugAddr "0.0.0.0:6060": must be a loopback address`},
		{"bad allowed host", server.Config{DataDir: dir, AllowedHosts: []string{"http://x"}}, "AllowedHosts"},
		{"bad token", server.Config{DataDir: dir, Tokens: []string{"name:short:admin:*"}}, "secret of name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = quiet()
			srv, err := server.New(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("New: %v, %v; want an error with %q", srv, err, tc.msg)
			}
		})
	}
	if m, _ := filepath.Glob(dir); len(m) != 0 {
		t.Error("a refused server created its data directory")
	}
}

// TestServeAndShutdown: a message sent over HTTP is leased in-process
// (one engine); Shutdown drains Serve, which returns ErrServerClosed, and
// stops the engine; later calls refuse.
func TestServeAndShutdown(t *testing.T) {
	ctx := context.Background()
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	c, err := delayq.NewClient("http://"+ln.Addr().String(), delayq.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, "t", delayq.NewSendRequest([]byte("over http"), delayq.WithID("m"))); err != nil {
		t.Fatal(err)
	}
	ms, err := srv.Queue().Lease(ctx, "t", delayq.LeaseRequest{Wait: 5 * time.Second})
	if err != nil || len(ms) != 1 || string(ms[0].Payload) != "over http" {
		t.Fatalf("in-process lease: %v %v", ms, err)
	}
	if err := srv.Queue().Ack(ctx, "t", "m", ms[0].Receipt); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want ErrServerClosed", err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln2); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if _, err := srv.Queue().Send(ctx, "t", delayq.NewSendRequest(nil)); !errors.Is(err, delayq.ErrUnavailable) {
		t.Fatalf("send after shutdown: %v, want ErrUnavailable", err)
	}
}

// TestInProcessLeaseInDashboard: the dashboard's message history shows a
// lease made in-process (as a Worker's or a push's), because the engine
// reports it, not a decorator of the API's queue.
func TestInProcessLeaseInDashboard(t *testing.T) {
	ctx := context.Background()
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	q := srv.Queue()
	if _, err := q.Send(ctx, "orders", delayq.NewSendRequest([]byte("x"), delayq.WithID("o1"))); err != nil {
		t.Fatal(err)
	}
	if ms, err := q.Lease(ctx, "orders", delayq.LeaseRequest{}); err != nil || len(ms) != 1 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	req := httptest.NewRequest("GET", "/ui/message?topic=orders&id=o1", nil)
	req.Host = "127.0.0.1:7070"
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK || !strings.Contains(string(body), "<strong>sent</strong>") || !strings.Contains(string(body), "<strong>leased</strong>") {
		t.Fatalf("message page: %d, no sent and leased events:\n%.2000s", rec.Code, body)
	}
}

// TestNoDashboard: NoDashboard leaves /ui/ unserved.
func TestNoDashboard(t *testing.T) {
	ctx := context.Background()
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), NoDashboard: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	req := httptest.NewRequest("GET", "/ui/", nil)
	req.Host = "127.0.0.1"
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Fatalf("/ui/ without dashboard: %d", rec.Code)
	}
}

// TestObservabilityWiring: New wires the build into /healthz, the push
// service's outcomes into /metrics, and Config.TracerProvider into the
// API's server spans.
func TestObservabilityWiring(t *testing.T) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), Logger: quiet(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	get := func(path string) (*httptest.ResponseRecorder, string) {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "127.0.0.1"
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, req)
		return w, w.Body.String()
	}
	w, body := get("/healthz")
	if w.Code != 200 || !strings.Contains(body, `"version":"`) || w.Header().Get("X-Request-Id") == "" {
		t.Fatalf("healthz: %d %s %v", w.Code, body, w.Header())
	}
	if spans := rec.Ended(); len(spans) != 1 || spans[0].Name() != "GET /healthz" {
		t.Fatalf("spans %v, want one named GET /healthz", spans)
	}

	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer hooks.Close()
	q := srv.Queue()
	if _, err := q.SetTopicSettings(ctx, "hooks", delayq.TopicSettings{Push: &delayq.PushSettings{URL: hooks.URL, Timeout: time.Second}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(ctx, "hooks", delayq.NewSendRequest([]byte("x"), delayq.WithID("p1"))); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, body = get("/metrics")
		if strings.Contains(body, `delayq_push_delivered_total{topic="hooks"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no push in /metrics:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
