package server

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Config configures a Server. The zero value of each field means its
// default, stated on the field; `delayq serve` sets each from the flag of
// the same name.
type Config struct {
	// Where messages are kept: the PostgreSQL, MySQL/MariaDB or Redis
	// store when its URL is given (at most one of them), else the
	// embedded store in DataDir. One of them is required.

	// DataDir is the embedded store's directory (created if missing).
	DataDir string
	// RedisURL is redis://host:port/0, redis+cluster://h1:p1,h2:p2 or
	// redis+sentinel://s1:p1,s2:p2/MASTERNAME/0 (rediss… for TLS).
	RedisURL string
	// RedisPartitions per topic, fixed by the first server of a key
	// prefix. Default: as stored, else 4 on a Cluster and 1 on one server.
	RedisPartitions int
	// RedisAllowEviction starts even if Redis may evict keys (a
	// maxmemory-policy other than noeviction): messages can be lost.
	RedisAllowEviction bool
	// PostgresURL is postgres://user:pass@host:5432/db?sslmode=… (or
	// key=value pairs).
	PostgresURL string
	// PostgresSchema holds delayq's tables. Default "delayq".
	PostgresSchema string
	// MySQLURL is mysql://user:pass@host:3306/db?param=value.
	MySQLURL string
	// MySQLPrefix prefixes delayq's tables. Default "delayq_".
	MySQLPrefix string
	// SQLTimeout bounds each PostgreSQL or MySQL/MariaDB store call (a
	// send's transaction, a lease's…): past it the call fails, an API
	// request with 503. Default: the store's (2 s).
	SQLTimeout time.Duration
	// NoMigrate refuses to start unless the PostgreSQL or MySQL schema is
	// already at this version (made by `delayq migrate`), instead of
	// creating or upgrading it.
	NoMigrate bool

	// Addr is where ListenAndServe listens. Default 127.0.0.1:7070.
	Addr string
	// Tokens are bearer tokens, NAME:SECRET:SCOPES:PATTERNS each, e.g.
	// "billing:s3cr3t-billing-0123456789:produce,consume:billing.*";
	// scopes are produce, consume and admin (which implies the others),
	// patterns are comma-separated topic globs where * matches anything.
	Tokens []string
	// TokensFile holds more tokens, one per line (# comments).
	TokensFile string
	// Insecure allows a non-loopback Addr (or listener) without tokens.
	// Without it, and without tokens, New and Serve refuse one.
	Insecure bool
	// AllowedHosts are the Host header names answered besides loopback
	// names (a DNS-rebinding defence): name, name:port, [IPv6], *.domain,
	// or * for any. Default: loopback names on a loopback Addr; elsewhere
	// any Host with tokens, else also IP literals.
	AllowedHosts []string
	// TLSCertFile and TLSKeyFile (PEM), when both are set, make the API
	// speak HTTPS only.
	TLSCertFile, TLSKeyFile string
	// NoDashboard turns off the web dashboard at /ui/.
	NoDashboard bool
	// DashboardSessionKeys sign the dashboard's session cookies and form
	// (CSRF) tokens, each at least 32 bytes. The first signs, all verify:
	// to rotate, put the new key first and drop the old one a session
	// lifetime (8 h) later. Servers behind one load balancer need the same
	// keys (and tokens) to accept each other's logins. Default: a random
	// key per process, so a login works only on the server that made it,
	// until it restarts (logged at start).
	DashboardSessionKeys []string
	// DebugAddr serves Go's profiling endpoints (/debug/pprof/) on this
	// loopback address, on a listener of their own; "" (the default): off.
	DebugAddr string
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider turns on tracing: a server span per API request,
	// continuing the request's W3C traceparent, and a "traceparent" header
	// on each sent message that has none, naming the send's span, so a
	// Worker with WorkerConfig.TracerProvider links its handler's span to
	// it. Nil (the default): no tracing, at no cost. `delayq serve` sets it
	// from the OTEL_* environment variables.
	TracerProvider trace.TracerProvider

	// MaxPayload is the payload limit in bytes. Default 1 MiB.
	MaxPayload int
	// MaxDelay is the longest delay accepted. Default 10 years.
	MaxDelay time.Duration
	// DedupWindow is how long an acked id still dedups sends. Default 24 h.
	DedupWindow time.Duration
	// DefaultLease is the lease of topics that set none. Default 30 s.
	DefaultLease time.Duration
	// DefaultMaxAttempts is the failures before a message goes dead, for
	// topics that set none. Default 25.
	DefaultMaxAttempts int
	// MaxTopics bounds the topics sends and settings may create; beyond
	// it creating one fails with ErrConflict (existing topics keep
	// working). Default 10000; negative: no limit.
	MaxTopics int

	// MaxConns caps concurrent connections per listener; at the cap the
	// longest-idle connection is closed for a new one. Default 4096;
	// negative: no cap.
	MaxConns int
	// MaxConnsPerIP caps one client IP's (IPv6: /64's) connections per
	// listener. Default 1024; negative: no cap.
	MaxConnsPerIP int
	// MaxBodyMemory bounds the request body bytes held at once across all
	// requests; over it a request waits up to 1 s, then gets 503.
	// Default 256 MiB (or twice the largest body limit); negative: no bound.
	MaxBodyMemory int64
	// StoreWait is how long New keeps trying to open a store that is
	// unavailable (Redis down or loading its data, a database starting
	// or refusing connections, the data directory locked by a server
	// still shutting down), retrying with backoff and logging each
	// failure, before it gives up. Errors that waiting cannot fix (a bad
	// URL, credentials or a database refused, a refused configuration, a
	// newer store format) fail at once.
	// Default 1 min; negative: no wait.
	StoreWait time.Duration
	// DrainTimeout is what in-flight requests get at Shutdown, and then
	// what pushes in flight and the engine's background work get each.
	// Default 15 s.
	DrainTimeout time.Duration
	// TokenRateLimit and IPRateLimit limit API requests per second per
	// bearer token and per client IP (IPv6: per /64; also the
	// dashboard's); over a limit the answer is 429 with Retry-After.
	// Default 0: no limit. The bursts default to one second's worth.
	TokenRateLimit, IPRateLimit float64
	TokenRateBurst, IPRateBurst int

	// Clock reads the engine's time. Default: the system clock. Only
	// tests of servers whose clocks disagree set it.
	Clock interface{ Now() time.Time }
}
