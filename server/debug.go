package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/delayq/delayq/internal/httpapi"
)

// checkLoopback refuses a debug address that is not on a loopback
// interface: the profiling endpoints have no authentication.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("server: DebugAddr %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("server: DebugAddr %q: must be a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT); the profiling endpoints have no authentication", addr)
}

// startDebug serves Go's profiling endpoints (/debug/pprof/: CPU and heap
// profiles, goroutine dumps, execution traces) on their own listener, off
// the API's mux, so they are never reachable with an API token nor through
// the API's address. A profile or trace reveals internals and costs CPU,
// so the address must be loopback (reach it remotely through an SSH
// tunnel or a port-forward). It returns a function that stops the
// listener.
func startDebug(addr string, allowedHosts []string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	// Only loopback Host names and AllowedHosts: a page on a rebound DNS
	// name must not read profiles.
	h, err := httpapi.DebugHandler(allowedHosts)
	if err != nil {
		return nil, fmt.Errorf("server: AllowedHosts: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server: DebugAddr: %w", err)
	}
	// Limits like the API's listener, but no write timeout:
	// /debug/pprof/profile and /trace stream for ?seconds=N (30 s by
	// default).
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("debug listener", "err", err)
		}
	}()
	log.Info("profiling endpoints on", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
