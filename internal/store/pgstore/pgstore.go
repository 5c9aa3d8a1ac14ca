package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/store"
)

// DefaultSchema is the schema of the store's tables when Options.Schema is
// empty.
const DefaultSchema = "delayq"

// DefaultTimeout bounds each call when Options.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// TimeSource says which clock judges "now" (due, lease expiry, stamps).
type TimeSource int

const (
	// TimeDB (the default) reads the database server's clock inside
	// every operation and ignores the Now of the call: one clock for every
	// server sharing the database. See the package doc, "Time".
	TimeDB TimeSource = iota
	// TimeCaller uses the Now each call passes. For tests that drive time
	// (the conformance suite), and for a single server that prefers its
	// own clock; never for several servers whose clocks may disagree.
	TimeCaller
)

// Options configure Open. One of URL and Pool is required.
type Options struct {
	// URL of the database, postgres://user:pass@host:port/db?opts or a
	// key=value connection string; pgx's parameters apply
	// (connect_timeout, sslmode, pool_max_conns, …). Error messages and
	// logs show it with the password hidden (RedactURL).
	URL string
	// Pool is used instead of URL when set; the store does not close it.
	// Its sessions must default to read committed isolation (the
	// operations' locking relies on a fresh snapshot per statement) and
	// must not go through a transaction pooler (pgbouncer's transaction
	// mode): LISTEN needs a session of its own.
	Pool *pgxpool.Pool
	// Schema holds the store's tables and functions: 1-48 chars of
	// [a-z0-9_], not starting with a digit. Default "delayq".
	Schema string
	// NoMigrate makes Open check that the schema is at the version this
	// build needs instead of creating or upgrading it (run `delayq
	// migrate` or Migrate first). By default Open migrates, under an
	// advisory lock, so that servers starting together migrate once.
	NoMigrate bool
	// TimeSource says whose clock judges time. Default TimeDB.
	TimeSource TimeSource
	// Timeout bounds each call (connecting, waiting for a pooled
	// connection, the statements), so that calls fail with
	// store.ErrUnavailable instead of hanging when the database is down.
	// Default DefaultTimeout.
	Timeout time.Duration
	// Logger receives notification errors. Default slog.Default().
	Logger *slog.Logger
}

// Store is the PostgreSQL store.Store (and store.Notifier, store.Clock,
// store.RateLimiter). It is safe for concurrent use, and any number of
// Stores, in any number of processes, may share one schema.
type Store struct {
	pool      *pgxpool.Pool
	ownPool   bool
	connCfg   *pgx.ConnConfig // for the LISTEN connection
	schema    string          // validated, unquoted
	q         string          // schema as a quoted identifier, for SQL text
	channel   string          // LISTEN/NOTIFY channel
	log       *slog.Logger
	callerNow bool
	timeout   time.Duration

	closed    atomic.Bool
	calls     atomic.Int64  // calls begun (bound), for the vacuum's idle check
	done      chan struct{} // closed by Close; ends Subscribe
	closeOnce sync.Once

	// announced is, per topic, the earliest due time (database ms) this
	// store notified that had not come due when it did (notifySoon).
	announcedMu sync.Mutex
	announced   map[string]int64

	// foldMu is held by the one count fold running (foldCounts);
	// foldedAt is when the last one ended.
	foldMu   sync.Mutex
	foldedAt time.Time
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.Notifier    = (*Store)(nil)
	_ store.DueLeaser   = (*Store)(nil)
	_ store.Clock       = (*Store)(nil)
	_ store.RateLimiter = (*Store)(nil)
	_ store.Pinger      = (*Store)(nil)

	_ store.TopicSettingsLister = (*Store)(nil)
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// checkSchema validates a schema name. Names are kept to a plain subset
// so that they need no quoting anywhere and "<schema>.notify" fits the
// 63-byte limit of channel names.
func checkSchema(s string) error {
	if !schemaRE.MatchString(s) {
		return fmt.Errorf("pgstore: invalid schema %q: want 1-48 chars of [a-z0-9_], not starting with a digit", s)
	}
	return nil
}

// Open connects, migrates the schema (unless NoMigrate) and returns the
// store. It fails with an error wrapping store.ErrUnavailable when the
// database does not answer within Timeout.
func Open(ctx context.Context, opts Options) (*Store, error) {
	schema := cmp.Or(opts.Schema, DefaultSchema)
	if err := checkSchema(schema); err != nil {
		return nil, err
	}
	s := &Store{
		schema:    schema,
		q:         pgx.Identifier{schema}.Sanitize(),
		channel:   schema + ".notify",
		log:       cmp.Or(opts.Logger, slog.Default()),
		callerNow: opts.TimeSource == TimeCaller,
		timeout:   cmp.Or(opts.Timeout, DefaultTimeout),
		done:      make(chan struct{}),
		pool:      opts.Pool,
	}
	if s.pool == nil {
		cfg, err := poolConfig(opts.URL, s.timeout)
		if err != nil {
			return nil, err
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return nil, fmt.Errorf("pgstore: %w", redactErr(err, opts.URL))
		}
		s.pool, s.ownPool = pool, true
	}
	s.connCfg = s.pool.Config().ConnConfig.Copy()
	fail := func(err error) (*Store, error) {
		if s.ownPool {
			s.pool.Close()
		}
		return nil, err
	}
	if err := s.checkIsolation(ctx); err != nil {
		return fail(err)
	}
	if opts.NoMigrate {
		if err := s.checkVersion(ctx); err != nil {
			return fail(err)
		}
	} else if err := migrate(ctx, s.connCfg, schema, s.timeout); err != nil {
		return fail(err)
	}
	return s, nil
}

// checkIsolation refuses sessions that do not default to read committed
// (a Pool passed in, or a database or role configured otherwise): the
// operations lock rows and then rely on each statement seeing what
// committed meanwhile.
func (s *Store) checkIsolation(ctx context.Context) (err error) {
	ctx, end := s.bound(ctx)
	defer end(&err)
	var iso string
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso); err != nil {
		return s.fail("check isolation", err)
	}
	if iso != "read committed" {
		return fmt.Errorf("pgstore: sessions run in %s isolation; the store needs read committed (set default_transaction_isolation on the pool's connections)", iso)
	}
	return nil
}

// poolConfig parses the URL and sets what every connection of the store
// needs: connect and statement timeouts, read committed isolation (the
// operations' locking is written for it), no JIT, an application name.
func poolConfig(url string, timeout time.Duration) (*pgxpool.Config, error) {
	if url == "" {
		return nil, errors.New("pgstore: Options.URL or Options.Pool is required")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse URL %q: %w", RedactURL(url), redactErr(err, url))
	}
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > timeout {
		cc.ConnectTimeout = timeout
	}
	setDefault(cc.RuntimeParams, "application_name", "delayq")
	cc.RuntimeParams["default_transaction_isolation"] = "read committed"
	// The server gives up on a statement a little after the client did,
	// so that a call abandoned on a hung connection does not run on.
	setDefault(cc.RuntimeParams, "statement_timeout", strconv.FormatInt((2*timeout).Milliseconds(), 10))
	// No JIT: every statement the store runs reads a handful of rows, but
	// the planner's estimates for topic_info (a view, which cannot carry
	// SET jit = off as the op_ functions do) pass jit_above_cost, and
	// compiling it took 45-53 ms of a CPU for under 1 ms of work, several
	// times every 5 s (the safety sweep, push and delivery refreshes).
	setDefault(cc.RuntimeParams, "jit", "off")
	return cfg, nil
}

func setDefault(m map[string]string, k, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// Close implements store.Store: it ends Subscribe calls and closes the
// pool if Open made it. Calls after Close fail with ErrClosed, and so does
// a second Close.
func (s *Store) Close() error {
	err := store.ErrClosed
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		if s.ownPool {
			s.pool.Close()
		}
		err = nil
	})
	return err
}

// Schema is the schema the store works in.
func (s *Store) Schema() string { return s.schema }

// check fails fast on a closed store.
func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// bound derives the call's context: it ends Timeout from now unless the
// caller's ends sooner. end turns a failure caused by a time bound — this
// one, or the driver's connect timeout, which equals it — into an error
// that is not a context error, as long as the caller's ctx did not end.
func (s *Store) bound(ctx context.Context) (context.Context, func(*error)) {
	s.calls.Add(1)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		return ctx, func(*error) {}
	}
	bctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errCallBound)
	return bctx, func(errp *error) {
		own := context.Cause(bctx) == errCallBound
		cancel()
		if errp == nil || *errp == nil || ctx.Err() != nil {
			return
		}
		if own || errors.Is(*errp, context.DeadlineExceeded) {
			*errp = &boundError{err: *errp, d: s.timeout}
		}
	}
}

var errCallBound = errors.New("pgstore: the call's time bound passed")

// boundError is a call that its own time bound ended: store.ErrUnavailable,
// and not a context error (the caller's ctx did not end).
type boundError struct {
	err error
	d   time.Duration
}

func (e *boundError) Error() string {
	return strings.ReplaceAll(e.err.Error(), context.DeadlineExceeded.Error(),
		"no answer within "+e.d.String()+" (the call's time bound, Options.Timeout)")
}

func (e *boundError) Is(target error) bool { return target == store.ErrUnavailable }

// fail turns a driver error into a store error: ErrClosed after Close,
// else ErrUnavailable wrapping the cause (its text redacted and on one
// line). Context errors stay visible to errors.Is, unless a time bound
// caused them (see bound).
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w", op, store.ErrClosed)
	}
	err = redactErr(err, s.connCfg.ConnString())
	if hint := schemaHint(err); hint != "" {
		return fmt.Errorf("pgstore: %s: %w: %w (%s)", op, store.ErrUnavailable, err, hint)
	}
	return fmt.Errorf("pgstore: %s: %w: %w", op, store.ErrUnavailable, err)
}

// schemaHint explains errors that mean the schema is missing or older
// than this build.
func schemaHint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42883" || pe.Code == "42P01" || pe.Code == "3F000") {
		return "is the schema migrated to this build's version? see delayq migrate"
	}
	return ""
}

// nowArg is the p_now argument of every operation: NULL lets the
// database read its own clock; a number (TimeCaller) is used as now.
func (s *Store) nowArg(now int64) *int64 {
	if s.callerNow {
		return &now
	}
	return nil
}

// Ping implements store.Pinger: a call of the schema's own clock
// function, so a database without delayq's schema is not ready either.
func (s *Store) Ping(ctx context.Context) (err error) {
	if err := s.check(); err != nil {
		return err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	var now int64
	if err := s.pool.QueryRow(ctx, "SELECT "+s.q+".now_ms()").Scan(&now); err != nil {
		return s.fail("ping", err)
	}
	return nil
}

// StoreNow implements store.Clock: the database's clock, which every
// operation judges by (TimeDB). With TimeCaller, ok is false.
func (s *Store) StoreNow(ctx context.Context) (_ int64, ok bool, err error) {
	if err := s.check(); err != nil {
		return 0, false, err
	}
	if s.callerNow {
		return 0, false, nil
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	var now int64
	if err := s.pool.QueryRow(ctx, "SELECT "+s.q+".now_ms()").Scan(&now); err != nil {
		return 0, false, s.fail("read the database clock", err)
	}
	return now, true, nil
}
