package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/buildinfo"
	"github.com/delayq/delayq/internal/dashboard"
	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/targets"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/metrics"
	"github.com/delayq/delayq/internal/push"
	"github.com/delayq/delayq/internal/store"
)

// Server is a running delayq server: the engine on its store, push
// delivery, and the HTTP API with /metrics and the dashboard. It is safe
// for concurrent use.
type Server struct {
	cfg       Config
	log       *slog.Logger
	st        store.Store
	where     string
	eng       *engine.Engine
	pusher    *push.Service
	deliverer *deliver.Service
	api       *httpapi.Server
	authOn    bool
	stopDebug func()

	mu          sync.Mutex // guards closed and serving.Add
	closed      bool
	serving     sync.WaitGroup // Serve calls
	serveCtx    context.Context
	stopServing context.CancelFunc

	shutdownOnce sync.Once
	shutdownErr  error
}

// New checks cfg, opens the store and starts the engine, push delivery
// and, when DebugAddr is set, the profiling listener. The API is served by
// Serve or ListenAndServe, or mounted with Handler. Shutdown stops it all.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.Addr = cmp.Or(cfg.Addr, httpapi.DefaultAddr)
	cfg.DrainTimeout = cmp.Or(cfg.DrainTimeout, httpapi.DefaultDrainTimeout)
	cfg.StoreWait = cmp.Or(cfg.StoreWait, DefaultStoreWait)
	switch {
	case cfg.MaxTopics == 0:
		cfg.MaxTopics = engine.DefaultMaxTopics
	case cfg.MaxTopics < 0:
		cfg.MaxTopics = 0 // the engine's "no limit"
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	tokens, err := parseTokens(cfg.Tokens, cfg.TokensFile)
	if err != nil {
		return nil, err
	}
	if err := httpapi.CheckExposure(cfg.Addr, tokens.Enabled(), cfg.Insecure); err != nil {
		return nil, err
	}
	if err := httpapi.CheckAllowedHosts(cfg.AllowedHosts); err != nil {
		return nil, fmt.Errorf("server: AllowedHosts: %w", err)
	}
	if cfg.DebugAddr != "" {
		if err := checkLoopback(cfg.DebugAddr); err != nil {
			return nil, err
		}
	}
	for i, k := range cfg.DashboardSessionKeys {
		// Checked here too, before the store is opened.
		if len(k) < dashboard.MinSessionKeyBytes {
			return nil, fmt.Errorf("server: dashboard session key %d of %d is %d bytes; want at least %d (e.g. openssl rand -base64 32)",
				i+1, len(cfg.DashboardSessionKeys), len(k), dashboard.MinSessionKeyBytes)
		}
	}
	s := &Server{cfg: cfg, log: log, authOn: tokens.Enabled(), stopDebug: func() {}}
	s.serveCtx, s.stopServing = context.WithCancel(context.Background()) // #nosec G118 -- server-lifetime context; Shutdown cancels it
	if err := s.start(ctx, tokens); err != nil {
		s.stopServing()
		return nil, errors.Join(err, s.stop(context.Background()))
	}
	return s, nil
}

// start opens what the server runs, in the order stop undoes.
func (s *Server) start(ctx context.Context, tokens *auth.Set) error {
	cfg := &s.cfg
	m := metrics.New()
	var err error
	if s.st, s.where, err = openStoreWaiting(ctx, cfg, s.log); err != nil {
		return explainNewerFormat(err)
	}
	subs := []engine.Subscription{m.Subscription()}
	var rec *dashboard.Recorder
	if !cfg.NoDashboard {
		// The engine counts upcoming messages for the dashboard itself.
		rec = dashboard.NewRecorder(dashboard.RecorderConfig{NoUpcoming: true})
		subs = append(subs, rec.Subscription())
	}
	ecfg := engine.Config{
		Store: s.st, Logger: s.log, Subscriptions: subs,
		Defaults:   delayq.TopicSettings{Lease: cfg.DefaultLease, MaxAttempts: cfg.DefaultMaxAttempts},
		MaxPayload: cfg.MaxPayload, MaxDelay: cfg.MaxDelay, DedupWindow: cfg.DedupWindow, MaxTopics: cfg.MaxTopics,
		PreciseTimers: true,
	}
	if cfg.Clock != nil {
		ecfg.Clock = cfg.Clock
	}
	if s.eng, err = engine.Open(ctx, ecfg); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	if err := m.WatchQueue(s.eng, nil); err != nil {
		return err
	}
	// Pushes are leases on the engine, so its events show them in the
	// dashboard like any consumer's.
	if s.pusher, err = push.New(push.Config{Engine: s.eng, Logger: s.log, Observer: m}); err != nil {
		return err
	}
	s.pusher.Start()
	// Broker delivery is leases too, like push.
	if s.deliverer, err = deliver.New(deliver.Config{Engine: s.eng, Build: targets.New, Logger: s.log, Observer: m}); err != nil {
		return err
	}
	s.deliverer.Start()
	var dash http.Handler
	if rec != nil {
		keys := make([][]byte, len(cfg.DashboardSessionKeys))
		for i, k := range cfg.DashboardSessionKeys {
			keys[i] = []byte(k)
		}
		if len(keys) == 0 {
			s.log.Info("dashboard sessions are per process: no dashboard session key is set, so a login and its forms work only on this server until it restarts; give every server the same --dashboard-session-key to share them")
		}
		if dash, err = dashboard.New(dashboard.Config{Queue: s.eng, Recorder: rec, Upcoming: s.eng, Tokens: tokens, Logger: s.log, SessionKeys: keys}); err != nil {
			return err
		}
	}
	bi := buildinfo.Get()
	s.api, err = httpapi.New(httpapi.Config{
		Queue: s.eng, Scheduler: s.eng, Admin: s.eng, Ready: s.eng.Ready, Dashboard: dash, Tokens: tokens, Insecure: cfg.Insecure, Logger: s.log,
		Addr: cfg.Addr, AllowedHosts: cfg.AllowedHosts, TLSCertFile: cfg.TLSCertFile, TLSKeyFile: cfg.TLSKeyFile,
		Limits:   s.eng.Limits(),
		MaxConns: cfg.MaxConns, MaxConnsPerIP: cfg.MaxConnsPerIP, MaxBodyMemory: cfg.MaxBodyMemory, DrainTimeout: cfg.DrainTimeout,
		TokenRateLimit: cfg.TokenRateLimit, TokenRateBurst: cfg.TokenRateBurst, IPRateLimit: cfg.IPRateLimit, IPRateBurst: cfg.IPRateBurst,
		Metrics: m.Handler(), RequestObserver: m, Backup: s.backupFunc(),
		Version: bi.Version, Revision: bi.Short(), TracerProvider: cfg.TracerProvider,
	})
	if err != nil {
		return err
	}
	s.stopDebug, err = startDebug(cfg.DebugAddr, cfg.AllowedHosts, s.log)
	if err != nil {
		s.stopDebug = func() {}
	}
	return err
}

func parseTokens(specs []string, file string) (*auth.Set, error) {
	var toks []*auth.Token
	for _, spec := range specs {
		t, err := auth.ParseToken(spec)
		if err != nil {
			return nil, err
		}
		toks = append(toks, t)
	}
	if file != "" {
		ft, err := auth.ParseFile(file)
		if err != nil {
			return nil, err
		}
		toks = append(toks, ft...)
	}
	return auth.NewSet(toks)
}

// Queue is the engine, for producers and Workers in this process: calls
// go to the store directly, not over HTTP, with the same semantics and
// limits as the API's.
func (s *Server) Queue() delayq.Queue { return s.eng }

// Scheduler is the engine's recurring schedules.
func (s *Server) Scheduler() delayq.Scheduler { return s.eng }

// Handler is the HTTP API, /metrics and the dashboard, for mounting on
// a server of your own. Serve adds what a listener needs besides:
// connection limits, timeouts, TLS and the drain at Shutdown.
func (s *Server) Handler() http.Handler { return s.api.Handler() }

// StoreDescription says where messages are kept, for logs: "data DIR",
// "redis URL", "postgres URL schema S" or "mysql URL prefix P", with
// passwords hidden.
func (s *Server) StoreDescription() string { return s.where }

// AuthEnabled reports whether requests need a bearer token.
func (s *Server) AuthEnabled() bool { return s.authOn }

// Serve serves the API on ln until Shutdown, which drains it, and closes
// ln. It refuses a non-loopback ln without tokens unless Insecure. After a
// clean drain it returns http.ErrServerClosed, as it does when called
// after Shutdown began. Serve may run on several listeners at once.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()
	if err := s.api.Serve(s.serveCtx, ln); err != nil {
		return err
	}
	return http.ErrServerClosed
}

// ListenAndServe listens on Config.Addr and serves there (see Serve).
func (s *Server) ListenAndServe() error {
	if err := httpapi.CheckExposure(s.cfg.Addr, s.authOn, s.cfg.Insecure); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return s.Serve(ln)
}

// Shutdown stops the server in order: it stops accepting and drains the
// API's requests (each Serve returns; long-polls answer at once), stops
// the profiling listener, stops push and broker delivery (pushes and
// publishes in flight finish),
// stops the engine, and closes the store. Draining, push and the engine
// get DrainTimeout each, less if ctx ends first; what did not finish is
// cut short (pushes are nacked) and reported. Calls after the first wait
// for it and return its result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.stopServing()
		done := make(chan struct{})
		go func() { s.serving.Wait(); close(done) }()
		var errs []error
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("server: drain requests: %w", ctx.Err()))
		}
		s.shutdownErr = errors.Join(append(errs, s.stop(ctx))...)
	})
	return s.shutdownErr
}

// stop stops what start started, in reverse, each step bounded by
// DrainTimeout (and ctx).
func (s *Server) stop(ctx context.Context) error {
	var errs []error
	s.stopDebug()
	step := func(what string, f func(context.Context) error) {
		sctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
		defer cancel()
		if err := f(sctx); err != nil {
			errs = append(errs, fmt.Errorf("server: %s: %w", what, err))
		}
	}
	if s.pusher != nil {
		step("stop push delivery", s.pusher.Stop)
	}
	if s.deliverer != nil {
		step("stop broker delivery", s.deliverer.Stop)
	}
	if s.eng != nil {
		step("stop engine", s.eng.Close)
	}
	if s.st != nil {
		if err := s.st.Close(); err != nil {
			errs = append(errs, fmt.Errorf("server: close store: %w", err))
		}
	}
	return errors.Join(errs...)
}
