package httpapi

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/ratelimit"
)

// Defaults of Config.
const (
	DefaultAddr              = "127.0.0.1:7070"
	DefaultBatchBodyBytes    = 16 << 20
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = domain.MaxWait + 30*time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 4096
	DefaultMaxConnsPerIP     = 1024
	DefaultMaxBodyMemory     = 256 << 20
	DefaultDrainTimeout      = 15 * time.Second

	// smallBodyBytes bounds bodies that carry no payload (lease, ack,
	// nack, extend, reschedule, topic settings).
	smallBodyBytes = 64 << 10
	// ackBatchBodyBytes fits 1000 acks with 200-byte ids and receipts.
	ackBatchBodyBytes = 1 << 20
	// bodySlack is room for a message's fields besides its payload.
	bodySlack = 64 << 10
)

// RequestObserver records finished HTTP requests (internal/metrics
// implements it). method is the request's method when it is a standard
// one, else "OTHER"; route is the routing-table pattern without its method
// ("/v1/topics/{topic}/messages"), or a fixed name: "unmatched",
// "refused host". Both come from small fixed sets, never from the raw
// request.
type RequestObserver interface {
	ObserveRequest(method, route string, code int, d time.Duration)
	RequestStarted()
	RequestDone()
}

// Config configures a Server. The zero value of each field means its
// default, stated on the field.
type Config struct {
	// Queue serves the API. Required.
	Queue domain.Queue
	// Scheduler serves /v1/schedules; nil: those routes answer 501.
	Scheduler domain.Scheduler
	// Admin serves browsing (GET …/messages), bulk cancel and reschedule,
	// pause and resume of topics; nil: those routes answer 501.
	Admin domain.TopicAdmin
	// OwnTopicSettings reads the settings a topic set itself, without the
	// defaults, for PATCH /v1/topics/{topic} to merge into. Nil: Queue's
	// TopicOwnSettings method when it has one (the engine does), else the
	// effective settings (a PATCH then also fixes the defaults in force).
	OwnTopicSettings func(ctx context.Context, topic string) (domain.TopicSettings, error)
	// Ready answers /readyz; nil means always ready.
	Ready func(ctx context.Context) error
	// Tokens enable bearer authentication; nil or empty means off, which
	// is allowed only on a loopback address unless Insecure is set.
	Tokens *auth.Set
	// Insecure allows a non-loopback address without tokens.
	Insecure bool
	// AllowedHosts are the Host header values answered (a DNS-rebinding
	// defence): names or IPs, optionally with :port, "*.domain", or "*"
	// for any. Loopback names are always allowed. Other Hosts get 403 on
	// every route, dashboard included. Empty: loopback names when Addr is
	// loopback; any Host on another address with Tokens; loopback names
	// and IP literals on another address without Tokens.
	AllowedHosts []string
	// Logger for request logs (debug) and failures. Default slog.Default().
	// Every line about a request carries its request_id (see
	// wire.HeaderRequestID).
	Logger *slog.Logger
	// Version and Revision of the running build, answered by GET /healthz
	// (omitted when empty).
	Version, Revision string
	// TracerProvider, when set, makes a server span for every request,
	// continuing the W3C trace context (traceparent) the request carries,
	// and gives each sent message that has no "traceparent" header one
	// holding that span's context, so a consumer can link its work to the
	// send across the delay. Nil: no tracing, at no cost.
	TracerProvider trace.TracerProvider

	// Addr is where ListenAndServe listens. Default 127.0.0.1:7070.
	Addr string
	// TLSCertFile and TLSKeyFile, when both set, make the server speak
	// HTTPS only (TLS 1.2 minimum).
	TLSCertFile, TLSKeyFile string

	// Limits are the Queue's payload and delay limits, as the engine that
	// enforces them reports them ((*engine.Engine).Limits); zero fields
	// mean the defaults. The server does not enforce them itself: it
	// sizes bodies by MaxPayload, and checks a batch's items with them
	// before sending any, so that one bad item rejects the whole batch.
	Limits domain.Limits
	// MaxBodyBytes bounds a single-send body. Default 2×Limits.MaxPayload
	// + 64 KiB: a payload as a JSON string may need escapes, and base64
	// costs 4/3.
	MaxBodyBytes int64
	// MaxBatchBodyBytes bounds a batch-send body (so a batch holds up to
	// 1000 messages but not 1000 × 1 MiB). Default 16 MiB.
	MaxBatchBodyBytes int64

	// MaxBodyMemory bounds the request body bytes held at once across all
	// requests (each body's buffer, from the first read until its handler
	// returns). A request that would exceed it waits up to 1 s for others,
	// then gets 503 with Retry-After. Default 256 MiB (or twice the
	// largest body limit, if more); it must be larger than every body
	// limit; negative means no bound.
	MaxBodyMemory int64

	// ReadHeaderTimeout default 5 s; ReadTimeout default 30 s;
	// WriteTimeout default 60 s, and it must exceed domain.MaxWait (30 s)
	// by 5 s at least so long-polls can answer; IdleTimeout default 120 s.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds request headers (larger: 431). Default 64 KiB.
	MaxHeaderBytes int
	// MaxConns caps concurrent connections per listener. At the cap the
	// connection idle the longest is closed to let a new one in; when none
	// is idle, new ones wait in the kernel's accept queue. Default 4096;
	// negative means no cap.
	MaxConns int
	// MaxConnsPerIP caps one client IP's (IPv6: /64's) connections per
	// listener. At the cap that client's longest-idle connection is closed
	// for the new one; when none is idle the new one is closed at once.
	// Behind a proxy or NAT clients share an IP. Default 1024; negative
	// means no cap.
	MaxConnsPerIP int
	// DrainTimeout bounds graceful shutdown: in-flight requests get this
	// long to finish before connections are closed. Default 15 s.
	DrainTimeout time.Duration

	// Metrics is served at GET /metrics (with auth on, only to a token with
	// admin on "*"). Nil: /metrics is 404.
	Metrics http.Handler
	// Backup writes an online backup of the store to w as a tar archive,
	// served at GET /v1/admin/backup (admin on "*"). Nil: the store has
	// none of its own (Redis, PostgreSQL, MySQL are backed up with their
	// own tools) and the route answers 501.
	Backup func(ctx context.Context, w io.Writer) error
	// RequestObserver records requests for metrics; nil: none.
	RequestObserver RequestObserver
	// Dashboard is served at /ui/ (and GET / redirects there), outside
	// the API's bearer authentication: it does its own, with cookies and
	// CSRF tokens (internal/dashboard). Nil: no dashboard, / is 404.
	Dashboard http.Handler
	// TokenRateLimit and IPRateLimit limit API requests per second per
	// bearer token (checked after authentication) and per client IP (IPv6:
	// per /64; checked first, also on the dashboard); 0 means no limit.
	// Over a limit: 429 with Retry-After. Health checks are never limited.
	// The bursts default to one second's worth (ceil of the rate).
	TokenRateLimit, IPRateLimit float64
	TokenRateBurst, IPRateBurst int
	// Now reads the time for ages in topic answers and for the rate
	// limits. Default time.Now.
	Now func() time.Time
}

// Server is the HTTP API v1. It is safe for concurrent use; Serve may run
// on several listeners at once, and they all drain when their ctx ends.
type Server struct {
	cfg     Config
	log     *slog.Logger
	tlsConf *tls.Config
	mux     *http.ServeMux

	tokenLim, ipLim *ratelimit.Limiter // nil: off
	hosts           *hostPolicy
	requestIDs      domain.IDGenerator          // for requests that bring no usable X-Request-Id
	tracer          trace.Tracer                // nil: tracing off
	budget          *byteBudget                 // nil: no bound
	lastLimiter     atomic.Pointer[connLimiter] // of the latest Serve (tests)

	drainOnce sync.Once
	drainCtx  context.Context // cancelled when shutdown begins: ends long-polls
	drain     context.CancelFunc
}

// New checks cfg and builds the server.
func New(cfg Config) (*Server, error) {
	if cfg.Queue == nil {
		return nil, errors.New("server: Config.Queue is required")
	}
	cfg.Addr = cmp.Or(cfg.Addr, DefaultAddr)
	cfg.Limits = cfg.Limits.WithDefaults()
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, 2*int64(cfg.Limits.MaxPayload)+bodySlack)
	cfg.MaxBatchBodyBytes = cmp.Or(cfg.MaxBatchBodyBytes, DefaultBatchBodyBytes)
	cfg.ReadHeaderTimeout = cmp.Or(cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, DefaultReadTimeout)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	cfg.MaxHeaderBytes = cmp.Or(cfg.MaxHeaderBytes, DefaultMaxHeaderBytes)
	cfg.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)
	cfg.MaxConnsPerIP = cmp.Or(cfg.MaxConnsPerIP, DefaultMaxConnsPerIP)
	cfg.DrainTimeout = cmp.Or(cfg.DrainTimeout, DefaultDrainTimeout)
	if cfg.MaxBodyMemory == 0 { // room for two of the largest bodies at least (a huge --max-payload)
		cfg.MaxBodyMemory = max(DefaultMaxBodyMemory, 2*(max(cfg.MaxBodyBytes, cfg.MaxBatchBodyBytes)+1))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.Limits.MaxPayload < 0 || cfg.Limits.MaxDelay < 0 || cfg.MaxBodyBytes < 0 || cfg.MaxBatchBodyBytes < 0:
		return nil, errors.New("server: size and delay limits must not be negative")
	case badRate(cfg.TokenRateLimit) || badRate(cfg.IPRateLimit) || cfg.TokenRateBurst < 0 || cfg.IPRateBurst < 0:
		return nil, errors.New("server: rate limits must be finite and not negative, bursts not negative")
	case cfg.WriteTimeout < domain.MaxWait+5*time.Second:
		return nil, fmt.Errorf("server: WriteTimeout %s must be at least %s (the longest long-poll plus 5 s)", cfg.WriteTimeout, domain.MaxWait+5*time.Second)
	case cfg.MaxBodyMemory > 0 && cfg.MaxBodyMemory <= max(cfg.MaxBodyBytes, cfg.MaxBatchBodyBytes, ackBatchBodyBytes):
		return nil, fmt.Errorf("server: MaxBodyMemory %d must be larger than every body limit (MaxBodyBytes %d, MaxBatchBodyBytes %d)", cfg.MaxBodyMemory, cfg.MaxBodyBytes, cfg.MaxBatchBodyBytes)
	case (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == ""):
		return nil, errors.New("server: TLS needs both a certificate and a key file")
	}
	hosts, err := newHostPolicy(cfg.AllowedHosts, cfg.Addr, cfg.Tokens.Enabled())
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.OwnTopicSettings == nil {
		if q, ok := cfg.Queue.(interface {
			TopicOwnSettings(ctx context.Context, topic string) (domain.TopicSettings, error)
		}); ok {
			cfg.OwnTopicSettings = q.TopicOwnSettings
		}
	}
	s := &Server{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), hosts: hosts}
	if cfg.MaxBodyMemory > 0 {
		s.budget = newByteBudget(cfg.MaxBodyMemory)
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("server: load TLS key pair: %w", err)
		}
		s.tlsConf = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	s.newLimiters()
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	s.drainCtx, s.drain = context.WithCancel(context.Background()) // #nosec G118 -- server-lifetime context; s.drain is called when Serve shuts down
	s.mux = http.NewServeMux()
	for _, rt := range s.routes() {
		s.mux.Handle(rt.pattern, s.wrap(rt))
	}
	if cfg.Dashboard != nil {
		s.mux.Handle("/ui/", named("/ui/", s.limitedHandler(cfg.Dashboard)))
		s.mux.Handle("GET /{$}", named("GET /", http.RedirectHandler("/ui/", http.StatusFound)))
		s.mux.Handle("GET /ui", named("GET /ui", http.RedirectHandler("/ui/", http.StatusFound)))
	}
	return s, nil
}

// Handler returns the API handler (for tests and embedding). Serving it
// through Serve adds connection limits, timeouts and graceful shutdown.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// ListenAndServe listens on Config.Addr (refusing a non-loopback address
// without tokens unless Insecure) and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context) error {
	if err := CheckExposure(s.cfg.Addr, s.cfg.Tokens.Enabled(), s.cfg.Insecure); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting, answers long-polls at once with an empty list, and gives
// in-flight requests DrainTimeout to finish before closing connections.
// It returns nil after a clean shutdown. Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
		if err := CheckExposure(tcp.String(), s.cfg.Tokens.Enabled(), s.cfg.Insecure); err != nil {
			_ = ln.Close() // the exposure error is the one to report
			return err
		}
	}
	s.log.Info("answering Host headers", "allowed", s.hosts.describe())
	var lim *connLimiter
	if s.cfg.MaxConns > 0 || s.cfg.MaxConnsPerIP > 0 {
		lim = newConnLimiter(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerIP)
		ln = lim
		s.lastLimiter.Store(lim)
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		TLSConfig:         s.tlsConf,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		// "OPTIONS *" reaches our handler (Host check, JSON 404) instead
		// of net/http's own empty 200. What net/http answers before any
		// handler (431, 501, 417, 400 for a malformed request) stays its
		// plain text: http.Server has no hook for those.
		DisableGeneralOptionsHandler: true,
	}
	if lim != nil {
		hs.ConnState = lim.connState
	}
	errc := make(chan error, 1)
	go func() {
		var err error
		if s.tlsConf != nil {
			err = hs.ServeTLS(ln, "", "")
		} else {
			err = hs.Serve(ln)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.drainOnce.Do(s.drain)
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	err := hs.Shutdown(dctx)
	if err != nil {
		_ = hs.Close() // force-close after a failed drain; the drain error is reported
		err = fmt.Errorf("server: drain: %w (connections closed)", err)
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("server: %w", serr)
	}
	return err
}

// Draining reports whether shutdown has begun.
func (s *Server) Draining() bool { return s.drainCtx.Err() != nil }

// CheckExposure refuses a listen address that is not loopback when no
// tokens are configured, unless insecure is set. "localhost" and loopback
// IPs count as loopback; an empty host, 0.0.0.0, :: and other names do not.
func CheckExposure(addr string, authOn, insecure bool) error {
	if authOn || insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("server: bad listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	shown := host
	if shown == "" {
		shown = "all interfaces"
	}
	return fmt.Errorf("refusing to listen on %s (%s) without authentication: configure --token or --tokens-file, or pass --insecure to let anyone on the network use the queue", addr, shown)
}
