package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/buildinfo"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/tracing"
	"github.com/delayq/delayq/server"
)

func init() {
	register("serve", "run the server: HTTP API, /metrics, embedded engine", runServe)
}

const serveUsage = `Usage: delayq serve [flags]

Runs the delayq server on the embedded engine (--data), on Redis (--redis)
or on PostgreSQL (--postgres), or on MySQL/MariaDB (--mysql).

Every flag also reads DELAYQ_<FLAG> in upper snake case (--max-payload:
DELAYQ_MAX_PAYLOAD), and --config FILE (or DELAYQ_CONFIG) names a JSON
object keyed by flag names, e.g. {"addr":"127.0.0.1:7070","token":["…"]}.
Precedence: flags, then environment, then the file, then defaults.
Exception: --token reads DELAYQ_SERVE_TOKENS (specs separated by spaces),
because DELAYQ_TOKEN is the CLI's client token.

Tokens are NAME:SECRET:SCOPES:PATTERNS, e.g.
  --token 'billing:s3cr3t-billing-0123456789:produce,consume:billing.*'
scopes produce, consume, admin (admin implies the others); patterns are
comma-separated topic globs where * matches anything. A tokens file has one
token per line (# comments). Prefer the file: flags show in ps.
Without tokens the server listens only on loopback unless --insecure.
Only loopback Host names and --allowed-hosts are answered (DNS rebinding);
off loopback with tokens, any Host. Request bodies must be application/json
(curl: -H 'content-type: application/json').
/metrics needs a token with admin on "*" when tokens are configured.
Request rate limits (--rate-limit-token, --rate-limit-ip) are off unless set;
over a limit the answer is 429 with Retry-After.
Once listening, the server logs "delayq serving" with its URL (stderr, in
the --log-format). Tracing (OpenTelemetry) is off unless the standard
OTEL_* variables ask for it: OTEL_TRACES_EXPORTER=otlp or console, or an
OTLP endpoint in OTEL_EXPORTER_OTLP_ENDPOINT.

Flags:
`

// serveOpts are the flags of `delayq serve`.
type serveOpts struct {
	addr, data, redis, config      string
	allowedHosts                   string
	debugAddr                      string
	redisPartitions                int
	redisAllowEviction             bool
	postgres, postgresSchema       string
	postgresMigrate                bool
	mysql, mysqlPrefix             string
	mysqlMigrate                   bool
	sqlTimeout                     time.Duration
	insecure, noDashboard          bool
	dashboardSessionKey            string
	tokens                         serveTokenList
	tokensFile, tlsCert, tlsKey    string
	logFormat, logLevel            string
	maxPayload, defaultMaxAttempts int
	maxConns, maxConnsPerIP        int
	maxTopics                      int
	maxBodyMemory                  int64
	maxDelay, dedupWindow          time.Duration
	defaultLease, drainTimeout     time.Duration
	storeWait                      time.Duration
	rateToken, rateIP              float64
	burstToken, burstIP            int
	clockOffset                    time.Duration // hidden, testing only
}

// serveTokenList is the repeatable --token flag.
type serveTokenList []string

func (l *serveTokenList) String() string { return fmt.Sprintf("%d tokens", len(*l)) }

func (l *serveTokenList) Set(v string) error { *l = append(*l, v); return nil }

func serveFlags(o *serveOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("delayq serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.addr, "addr", httpapi.DefaultAddr, "listen `address`")
	fs.StringVar(&o.data, "data", "./delayq-data", "data `directory` of the embedded engine")
	fs.StringVar(&o.redis, "redis", "", "use the Redis engine at `URL` (redis://host:port/0, redis+cluster://h1:p1,h2:p2, or redis+sentinel://s1:p1,s2:p2/MASTERNAME/0; rediss… for TLS) instead of --data")
	fs.IntVar(&o.redisPartitions, "redis-partitions", 0, "partitions per topic on Redis (fixed by the first server of a prefix; 0: as stored, else 4 on a Cluster and 1 on one server)")
	fs.BoolVar(&o.redisAllowEviction, "redis-allow-eviction", false, "start even if Redis may evict keys (maxmemory-policy other than noeviction): messages can be lost")
	fs.StringVar(&o.postgres, "postgres", "", "use the PostgreSQL engine at `URL` (postgres://user:pass@host:5432/db?sslmode=…, or key=value) instead of --data")
	fs.StringVar(&o.postgresSchema, "postgres-schema", "delayq", "PostgreSQL `schema` of delayq's tables")
	fs.BoolVar(&o.postgresMigrate, "postgres-migrate", true, "create or upgrade the PostgreSQL schema at startup (false: refuse to start unless `delayq migrate` did)")
	fs.StringVar(&o.mysql, "mysql", "", "use the MySQL/MariaDB engine at `URL` (mysql://user:pass@host:3306/db?param=value) instead of --data")
	fs.StringVar(&o.mysqlPrefix, "mysql-prefix", mysqlstore.DefaultPrefix, "`prefix` of delayq's MySQL tables")
	fs.BoolVar(&o.mysqlMigrate, "mysql-migrate", true, "create or upgrade the MySQL tables at startup (false: refuse to start unless `delayq migrate` did)")
	durVar(fs, &o.sqlTimeout, "sql-timeout", mysqlstore.DefaultTimeout, "time bound of each PostgreSQL or MySQL store call (a send's transaction, a lease); past it the request gets 503")
	fs.StringVar(&o.config, "config", "", "JSON config `file`")
	fs.BoolVar(&o.insecure, "insecure", false, "allow a non-loopback address without tokens")
	fs.StringVar(&o.allowedHosts, "allowed-hosts", "", "Host header `names` the server answers, comma-separated (name, name:port, [IPv6], *.domain, or * for any); loopback names always. Default: loopback names on a loopback --addr; elsewhere any Host with tokens, else also IP literals")
	fs.BoolVar(&o.noDashboard, "no-dashboard", false, "do not serve the web dashboard at /ui/")
	fs.StringVar(&o.dashboardSessionKey, "dashboard-session-key", "", "`keys` (comma-separated, each 32+ bytes: openssl rand -base64 32) that sign dashboard logins; the first signs, all verify (rotation). Servers behind one load balancer need the same. Default: random per process (logins work only on this server until it restarts). Prefer DELAYQ_DASHBOARD_SESSION_KEY: flags show in ps")
	fs.StringVar(&o.debugAddr, "debug-addr", "", "serve Go's profiling endpoints (/debug/pprof/) on this loopback `address`; off by default")
	fs.Var(&o.tokens, "token", "bearer token `NAME:SECRET:SCOPES:PATTERNS` (repeatable)")
	fs.StringVar(&o.tokensFile, "tokens-file", "", "`file` of tokens, one per line")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate `file` (PEM)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "TLS key `file` (PEM)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	o.maxPayload = delayq.DefaultMaxPayload
	fs.Var((*sizeIntValue)(&o.maxPayload), "max-payload", "payload limit in `bytes`, or with a unit: 512KiB, 1MiB, 1MB")
	durVar(fs, &o.maxDelay, "max-delay", engine.DefaultMaxDelay, "longest delay accepted (also in days or years: 30d, 10y)")
	durVar(fs, &o.dedupWindow, "dedup-window", engine.DefaultDedupWindow, "how long an acked id still dedups sends")
	durVar(fs, &o.defaultLease, "default-lease", engine.DefaultLease, "lease of topics that set none")
	fs.IntVar(&o.defaultMaxAttempts, "default-max-attempts", engine.DefaultMaxAttempts, "failures before a message goes dead, for topics that set none")
	fs.IntVar(&o.maxConns, "max-conns", httpapi.DefaultMaxConns, "concurrent connection cap; at the cap the longest-idle connection is closed for a new one")
	fs.IntVar(&o.maxConnsPerIP, "max-conns-per-ip", httpapi.DefaultMaxConnsPerIP, "concurrent connections per client IP (IPv6: /64); at the cap that client's longest-idle one is closed, or the new one if none is idle; -1: no cap")
	fs.Var((*sizeValue)(&o.maxBodyMemory), "max-body-memory", "request body `bytes` (or 256MiB, 1GB…) held at once across all requests; over it a request waits up to 1 s, then gets 503 with Retry-After; 0: 256 MiB (or twice the largest body limit), -1: no bound")
	fs.IntVar(&o.maxTopics, "max-topics", engine.DefaultMaxTopics, "topics sends and settings may create; beyond it creating one is a 409 (existing topics keep working); 0: no limit")
	durVar(fs, &o.drainTimeout, "drain-timeout", httpapi.DefaultDrainTimeout, "time in-flight requests get at shutdown")
	durVar(fs, &o.storeWait, "store-wait", server.DefaultStoreWait, "how long to keep retrying a store that is unavailable at startup (Redis down or loading, a database starting); 0: fail at once")
	fs.DurationVar(&o.clockOffset, clockOffsetFlag, 0, "testing only: shifts this server's clock, to test servers whose clocks disagree")
	// Off by default: one client at full speed makes thousands of requests
	// a second, and behind a proxy all clients share the proxy's IP.
	fs.Float64Var(&o.rateToken, "rate-limit-token", 0, "API `requests` per second per bearer token; 0: no limit")
	fs.IntVar(&o.burstToken, "rate-limit-token-burst", 0, "`requests` a token may make at once; 0: one second's worth")
	fs.Float64Var(&o.rateIP, "rate-limit-ip", 0, "API and dashboard `requests` per second per client IP (IPv6: per /64); 0: no limit")
	fs.IntVar(&o.burstIP, "rate-limit-ip-burst", 0, "`requests` a client IP may make at once; 0: one second's worth")
	return fs
}

// serveEnvName maps a flag to its environment variable.
func serveEnvName(flagName string) string {
	if flagName == "token" {
		return "DELAYQ_SERVE_TOKENS"
	}
	return "DELAYQ_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseServe applies, for every flag not given on the command line, the
// environment, then the config file; defaults are the flags' own.
func parseServe(args []string, getenv func(string) string) (*serveOpts, error) {
	o := &serveOpts{}
	fs := serveFlags(o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	setFrom := func(name, value, source string) error {
		if name == "token" {
			o.tokens = nil
			for _, v := range strings.Fields(value) {
				o.tokens = append(o.tokens, v)
			}
			return nil
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s: invalid value for %s: %v", source, name, err)
		}
		return nil
	}
	// Environment first, remembering what it set, so the file fills only the rest.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		if v := getenv(serveEnvName(f.Name)); v != "" {
			envErr = setFrom(f.Name, v, serveEnvName(f.Name))
			set[f.Name] = true
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if o.config != "" {
		file, err := readServeConfig(o.config)
		if err != nil {
			return nil, err
		}
		for name, v := range file {
			if fs.Lookup(name) == nil || name == "config" {
				return nil, fmt.Errorf("config %s: unknown key %q (keys are flag names)", o.config, name)
			}
			if set[name] {
				continue
			}
			if err := setFrom(name, v, "config "+o.config); err != nil {
				return nil, err
			}
		}
	}
	return o, nil
}

// readServeConfig reads a JSON object of flag names to strings, numbers,
// booleans or (for token) arrays of strings, as flag-value strings.
func readServeConfig(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path) // #nosec G304 -- path is the operator's --config flag; reading that file is the point
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("config %s: %v", path, err)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case string:
			out[k] = v
		case json.Number:
			out[k] = v.String()
		case bool:
			out[k] = fmt.Sprint(v)
		case []any:
			var parts []string
			for _, p := range v {
				s, ok := p.(string)
				if !ok || strings.ContainsAny(s, " \t\n") {
					return nil, fmt.Errorf("config %s: %s must be an array of strings without spaces", path, k)
				}
				parts = append(parts, s)
			}
			out[k] = strings.Join(parts, " ")
		default:
			return nil, fmt.Errorf("config %s: %s has an unsupported value", path, k)
		}
	}
	return out, nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseServe(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, serveUsage)
		printServeDefaults(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "delayq serve: %v (run 'delayq serve -h')\n", dashDash(err))
		return 2
	}
	if err := serve(ctx, o, stdout, stderr); err != nil {
		msg := err.Error()
		if server.EvictionRefused(err) { // name the flag, not the library's field
			msg = strings.Replace(msg, server.RedisAllowEvictionOption, "--redis-allow-eviction", 1)
		}
		fmt.Fprintf(stderr, "delayq serve: %s\n", msg)
		return 1
	}
	return 0
}

// serve runs the server until ctx ends, then shuts it down (see
// server.Shutdown for the order). Once it listens it logs "delayq
// serving" with the URL, the store, the auth state and the build.
func serve(ctx context.Context, o *serveOpts, stdout, stderr io.Writer) error {
	log, err := serveLogger(o.logFormat, o.logLevel, stderr)
	if err != nil {
		return err
	}
	cfg := serveConfig(o, log)
	// What the library refuses by Config field, refused here by flag.
	if err := httpapi.CheckAllowedHosts(cfg.AllowedHosts); err != nil {
		return fmt.Errorf("--allowed-hosts: %w", err)
	}
	if o.debugAddr != "" {
		if err := checkLoopback(o.debugAddr); err != nil {
			return err
		}
	}
	if (o.redis != "" && o.postgres != "") || (o.redis != "" && o.mysql != "") || (o.postgres != "" && o.mysql != "") {
		return errors.New("give one of --redis, --postgres and --mysql")
	}
	if o.sqlTimeout <= 0 {
		return fmt.Errorf("--sql-timeout %s: must be more than 0", o.sqlTimeout)
	}
	if o.storeWait < 0 {
		return fmt.Errorf("--store-wait %s: must be 0 (fail at once) or more", o.storeWait)
	}
	bi := buildinfo.Get()
	tr, err := tracing.FromEnv(ctx, bi.Version, stdout, log)
	if err != nil {
		return err
	}
	defer func() {
		// After the server's shutdown: the spans of the last requests are
		// flushed.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}()
	tracingState := "off"
	if tr.Provider != nil {
		cfg.TracerProvider = tr.Provider
		tracingState = tr.Exporter
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	shutdown := func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			log.Error("shut down", "err", err)
		}
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		shutdown()
		return err
	}
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	authState := "off"
	if srv.AuthEnabled() {
		authState = "on"
	}
	log.Info("delayq serving", "url", scheme+"://"+ln.Addr().String(), "store", srv.StoreDescription(), "auth", authState,
		"version", bi.Version, "revision", bi.Short(), "go", bi.Go, "tracing", tracingState)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served: // failed while serving
	case <-ctx.Done():
	}
	log.Info("shutting down", "err", err)
	shutdown()
	if err == nil {
		err = <-served
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// serveConfig maps the flags to the library's Config.
func serveConfig(o *serveOpts, log *slog.Logger) server.Config {
	cfg := server.Config{
		DataDir: o.data, RedisURL: o.redis, RedisPartitions: o.redisPartitions, RedisAllowEviction: o.redisAllowEviction,
		PostgresURL: o.postgres, PostgresSchema: o.postgresSchema, MySQLURL: o.mysql, MySQLPrefix: o.mysqlPrefix,
		NoMigrate: (o.postgres != "" && !o.postgresMigrate) || (o.mysql != "" && !o.mysqlMigrate), SQLTimeout: o.sqlTimeout,
		Addr: o.addr, Tokens: o.tokens, TokensFile: o.tokensFile, Insecure: o.insecure,
		AllowedHosts: splitHostList(o.allowedHosts), TLSCertFile: o.tlsCert, TLSKeyFile: o.tlsKey,
		NoDashboard: o.noDashboard, DashboardSessionKeys: splitKeyList(o.dashboardSessionKey), DebugAddr: o.debugAddr, Logger: log,
		MaxPayload: o.maxPayload, MaxDelay: o.maxDelay, DedupWindow: o.dedupWindow,
		DefaultLease: o.defaultLease, DefaultMaxAttempts: o.defaultMaxAttempts, MaxTopics: o.maxTopics,
		MaxConns: o.maxConns, MaxConnsPerIP: o.maxConnsPerIP, MaxBodyMemory: o.maxBodyMemory, DrainTimeout: o.drainTimeout,
		TokenRateLimit: o.rateToken, TokenRateBurst: o.burstToken, IPRateLimit: o.rateIP, IPRateBurst: o.burstIP,
		Clock: serveClock(o, log),
	}
	if o.maxTopics == 0 {
		cfg.MaxTopics = -1 // the flag's "no limit"
	}
	if o.storeWait <= 0 {
		cfg.StoreWait = -1 // the flag's "fail at once"
	} else {
		cfg.StoreWait = o.storeWait
	}
	return cfg
}

// splitHostList splits --allowed-hosts at commas and spaces (a config
// file's array arrives space-separated).
func splitHostList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

// splitKeyList splits --dashboard-session-key at commas (base64 holds
// none) and spaces (a config file's array arrives space-separated).
func splitKeyList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

func serveLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
