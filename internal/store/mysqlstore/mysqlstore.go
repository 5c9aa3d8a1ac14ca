package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/delayq/delayq/internal/store"
)

// DefaultPrefix prefixes the store's tables when Options.Prefix is empty.
const DefaultPrefix = "delayq_"

// DefaultTimeout bounds each call when Options.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// DefaultPollInterval is how often Subscribe reads the topics' change
// counters when Options.PollInterval is zero.
const DefaultPollInterval = 50 * time.Millisecond

// TimeSource says which clock judges "now".
type TimeSource int

const (
	// TimeDB (the default) reads the database server's clock in every
	// operation and ignores each call's Now: one clock for every server
	// sharing the database.
	TimeDB TimeSource = iota
	// TimeCaller uses the Now each call passes: for tests that drive time,
	// never for several servers whose clocks may disagree.
	TimeCaller
)

// Options configure Open.
type Options struct {
	// URL is mysql://user:pass@host:port/db?param=value (parameters are
	// go-sql-driver's). Errors show it with the password hidden.
	URL string
	// Prefix of the store's tables in the URL's database: 0-32 chars of
	// [a-z0-9_]. Default "delayq_".
	Prefix string
	// NoMigrate makes Open check the schema version instead of migrating.
	NoMigrate bool
	// TimeSource says whose clock judges time. Default TimeDB.
	TimeSource TimeSource
	// Timeout bounds each call. Default DefaultTimeout.
	Timeout time.Duration
	// PollInterval of Subscribe. Default DefaultPollInterval.
	PollInterval time.Duration
	// Logger receives notification errors. Default slog.Default().
	Logger *slog.Logger

	skipCheck bool // Migrate: open without looking at the schema
}

// Store is the MySQL/MariaDB store.Store (and store.Notifier, store.Clock).
type Store struct {
	db        *sql.DB
	p         string // table prefix, validated
	log       *slog.Logger
	callerNow bool
	// sessionRC: sessions start at READ COMMITTED (see Open).
	sessionRC bool
	// consecutiveSeq: a multi-row insert's AUTO_INCREMENT values are
	// consecutive (see sessionChecks).
	consecutiveSeq bool
	// multi: writes are batched, several statements per round trip
	// (writeBatch): the connection allows several statements per query
	// and interpolates parameters (a prepared statement holds one).
	multi   bool
	timeout time.Duration
	poll    time.Duration

	// fakeNow, when set (tests), is what the "database clock" reads.
	fakeNow atomic.Pointer[func() int64]

	// topics holds the names whose topic row was seen committed (rows
	// are never deleted): topicRow skips looking for them.
	topics sync.Map

	// afterLookup, when set (tests), runs between MessageInsertMany's
	// lookup of existing ids and its insert.
	afterLookup func()

	// stripes hands each transaction of this store a count stripe of
	// its own (see flushCountsOf); txStripe is the one a transaction
	// holds until it ends.
	stripes  stripePool
	txStripe sync.Map // *conntx -> int

	closed    atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
	_ store.Clock    = (*Store)(nil)
)

// testDial, when set (tests), makes the store's connections: to count
// the round trips an operation makes.
var testDial func(ctx context.Context, network, addr string) (net.Conn, error)

var prefixRE = regexp.MustCompile(`^[a-z0-9_]{0,32}$`)

// ParseURL converts a mysql:// URL to go-sql-driver's configuration.
func ParseURL(raw string) (*mysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "mysql" && u.Scheme != "mariadb") || u.Host == "" {
		return nil, fmt.Errorf("mysqlstore: invalid URL %q: want mysql://user:pass@host:port/db", RedactURL(raw))
	}
	c := mysql.NewConfig()
	c.Net, c.Addr = "tcp", u.Host
	if u.Port() == "" {
		c.Addr = u.Host + ":3306"
	}
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	c.DBName = strings.TrimPrefix(u.Path, "/")
	if c.DBName == "" || strings.Contains(c.DBName, "/") {
		return nil, fmt.Errorf("mysqlstore: URL %q names no database", RedactURL(raw))
	}
	q := u.Query()
	if len(q) > 0 {
		// Parse the parameters through the driver's own DSN syntax so
		// that every parameter it knows applies.
		dsn := "/x?" + q.Encode()
		pc, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("mysqlstore: URL %q: %v", RedactURL(raw), err)
		}
		pc.User, pc.Passwd, pc.Net, pc.Addr, pc.DBName = c.User, c.Passwd, c.Net, c.Addr, c.DBName
		c = pc
	}
	// found rows, not changed rows: an UPDATE that matched is a success.
	c.ClientFoundRows = true
	// Parameters are interpolated into the statement text, unless the URL
	// says otherwise: without it every statement with parameters is
	// three round trips (prepare, execute, close), which made most of a
	// send's time and of the server's CPU (syscalls). The driver falls
	// back to prepared statements for the character sets where
	// interpolation is unsafe.
	if !q.Has("interpolateParams") {
		c.InterpolateParams = true
	}
	// Several statements per query, unless the URL says otherwise: a
	// transaction's writes whose results nothing reads go to the server
	// in one round trip (writeBatch). Only the store's own constant
	// statements are sent; values are interpolated with escaping.
	if !q.Has("multiStatements") {
		c.MultiStatements = true
	}
	c.ParseTime = false
	return c, nil
}

// RedactURL hides the password of a URL.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "xxxxx" + raw[i:]
		}
		return raw
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}

func redactErr(err error, c *mysql.Config) error {
	if err == nil || c == nil || c.Passwd == "" {
		return err
	}
	if strings.Contains(err.Error(), c.Passwd) {
		return errors.New(strings.ReplaceAll(err.Error(), c.Passwd, "xxxxx"))
	}
	return err
}

// Open connects, migrates (unless NoMigrate) and returns the store.
func Open(ctx context.Context, o Options) (*Store, error) {
	prefix := o.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("mysqlstore: invalid table prefix %q: want 0-32 chars of [a-z0-9_]", prefix)
	}
	cfg, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	s := &Store{p: prefix, log: o.Logger, callerNow: o.TimeSource == TimeCaller, timeout: o.Timeout, poll: o.PollInterval, done: make(chan struct{}), stripes: newStripePool(),
		multi: cfg.MultiStatements && cfg.InterpolateParams}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.poll <= 0 {
		s.poll = DefaultPollInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = s.timeout
	}
	// Every session at READ COMMITTED from its start (the driver sets
	// Params when it connects), so that a transaction is one START
	// TRANSACTION, not a SET TRANSACTION ISOLATION LEVEL first: one round
	// trip of the ten a send takes. Checked below; txn sets the level
	// itself if the session's is not this one.
	cfg.Params = maps.Clone(cfg.Params)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["tx_isolation"] = "'READ-COMMITTED'"
	if testDial != nil {
		cfg.DialFunc = testDial
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: %w", redactErr(err, cfg))
	}
	s.db = sql.OpenDB(conn)
	s.db.SetMaxIdleConns(16)
	s.db.SetConnMaxIdleTime(time.Minute)
	c, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.db.PingContext(c); err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("mysqlstore: connect: %w: %w", store.ErrUnavailable, redactErr(err, cfg))
	}
	if err := s.sessionChecks(c); err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("mysqlstore: connect: %w: %w", store.ErrUnavailable, redactErr(err, cfg))
	}
	switch {
	case o.skipCheck:
	case o.NoMigrate:
		err = s.checkVersion(ctx)
	default:
		_, _, err = s.migrate(ctx)
	}
	if err != nil {
		_ = s.db.Close()
		return nil, err
	}
	return s, nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return store.ErrClosed
	}
	s.closeOnce.Do(func() { close(s.done) })
	return s.db.Close()
}

// t is a table name with the prefix.
func (s *Store) t(name string) string { return "`" + s.p + name + "`" }

// errRetry asks txn to run the transaction again.
var errRetry = errors.New("mysqlstore: retry")

func isDup(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

func isRetryable(err error) bool {
	if errors.Is(err, errRetry) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1213 || me.Number == 1205 // deadlock, lock wait timeout
	}
	return false
}

func (s *Store) wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrBadCursor) || errors.Is(err, store.ErrClosed) || errors.Is(err, store.ErrCorrupt) {
		return err
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	return fmt.Errorf("mysqlstore: %w: %w", store.ErrUnavailable, err)
}

// txn runs fn in a READ COMMITTED transaction (no gap locks: the queues'
// ranges are read with SKIP LOCKED and every write names its rows), with
// now the database's clock (or callNow in TimeCaller mode); deadlocks are
// retried.
func (s *Store) txn(ctx context.Context, callNow int64, fn func(tx *conntx, now int64) error) error {
	return s.txnLazy(ctx, callNow, false, fn)
}

// txnPick is txn for an operation whose first statement picks rows by
// the clock (a promote, a lease): in TimeDB mode fn gets now 0 and reads
// the database's clock in that statement (pickNow), which saves the
// transaction its own round trip for it.
func (s *Store) txnPick(ctx context.Context, callNow int64, fn func(tx *conntx, now int64) error) error {
	return s.txnLazy(ctx, callNow, !s.callerNow, fn)
}

// txnLazy is txn where, with lazyClock, fn gets now 0 and reads the
// database's clock itself, in its first statement.
func (s *Store) txnLazy(ctx context.Context, callNow int64, lazyClock bool, fn func(tx *conntx, now int64) error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		err = s.txnRun(ctx, callNow, lazyClock, fn)
		if !isRetryable(err) {
			break
		}
		time.Sleep(time.Duration(attempt+1) * time.Millisecond)
	}
	return s.wrap(err)
}

// txnRun runs one attempt; lazyClock: fn reads the clock itself.
func (s *Store) txnRun(ctx context.Context, callNow int64, lazyClock bool, fn func(tx *conntx, now int64) error) error {
	tx, err := s.beginTx(ctx)
	if err != nil {
		return err
	}
	defer tx.close()
	now := callNow
	if lazyClock {
		now = 0
	} else if !s.callerNow {
		if now, err = s.dbNow(ctx, tx); err != nil {
			tx.rollback(ctx)
			return timedOut(ctx, err)
		}
	}
	s.txStripe.Store(tx, -1) // a stripe is taken when the counts are flushed
	defer s.releaseStripe(tx)
	if err := fn(tx, now); err != nil {
		tx.rollback(ctx)
		return timedOut(ctx, err)
	}
	if err := tx.commit(ctx); err != nil {
		tx.rollback(ctx)
		return timedOut(ctx, err)
	}
	return nil
}

// timedOut names the cause when the call's time ran out mid-transaction
// (the driver then answers with the context's error, or a broken
// connection's).
func timedOut(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("the call's time ran out mid-transaction (Options.Timeout): %w (%w)", ctx.Err(), err)
	}
	return err
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// dbNow reads the database's clock in ms: the one clock every instant
// of an operation is computed from (read once per transaction, then
// passed to its statements). In tests (SetTestClock) the test's clock is
// read instead, through the same round trip; SET timestamp cannot stand
// in for NOW(), as it ends in 2038 and the suites use later instants.
func (s *Store) dbNow(ctx context.Context, q querier) (int64, error) {
	if f := s.fakeNow.Load(); f != nil {
		var now int64
		err := q.QueryRowContext(ctx, "SELECT CAST(? AS SIGNED)", (*f)()).Scan(&now)
		return now, err
	}
	var now int64
	err := q.QueryRowContext(ctx, "SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3))*1000) AS SIGNED)").Scan(&now)
	return now, err
}

// nowSQL is dbNow's clock as an SQL expression, for a statement that
// reads it while it picks (pickNow): NOW() is the statement's start in
// every place the statement names it. The test clock is read once, as a
// literal.
func (s *Store) nowSQL() string {
	if f := s.fakeNow.Load(); f != nil {
		return strconv.FormatInt((*f)(), 10)
	}
	return "CAST(FLOOR(UNIX_TIMESTAMP(NOW(3))*1000) AS SIGNED)"
}

// pickNow runs q, a pick (due, seq, id, topic) whose fifth column is
// nowSQL; now is that column, or 0 when nothing was picked.
func (s *Store) pickNow(ctx context.Context, tx *conntx, q string, args ...any) ([]qkey, int64, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []qkey
	var now int64
	for rows.Next() {
		var k qkey
		var id, top []byte
		if err := rows.Scan(&k.due, &k.seq, &id, &top, &now); err != nil {
			return nil, 0, err
		}
		k.id, k.top = string(id), string(top)
		out = append(out, k)
	}
	return out, now, rows.Err()
}

// Ping implements store.Pinger: a read of the schema's version row, so a
// database without delayq's tables is not ready either.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var one int
	err := s.db.QueryRowContext(ctx, "SELECT 1 FROM "+s.t("schema_version")+" LIMIT 1").Scan(&one) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated
	if errors.Is(err, sql.ErrNoRows) {
		err = nil // the table answers; Open checked its version
	}
	return s.wrap(err)
}

// StoreNow implements store.Clock.
func (s *Store) StoreNow(ctx context.Context) (int64, bool, error) {
	if s.callerNow {
		return 0, false, nil
	}
	if s.closed.Load() {
		return 0, false, store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	now, err := s.dbNow(ctx, s.db)
	if err != nil {
		return 0, false, s.wrap(err)
	}
	return now, true, nil
}

// SetTestClock makes the "database clock" read f, for tests that run the
// TimeDB path with a clock they drive. nil restores the real clock.
func (s *Store) SetTestClock(f func() int64) {
	if f == nil {
		s.fakeNow.Store(nil)
		return
	}
	s.fakeNow.Store(&f)
}

// sessionChecks reads, on one session, whether sessions start at READ
// COMMITTED (the tx_isolation parameter applied), and whether a
// multi-row insert numbers its rows consecutively: InnoDB's
// "consecutive" (1, MariaDB's default) or "traditional" (0) lock mode,
// and an auto_increment_increment of 1 (Galera sets others). Then the
// rows of an insert are numbered first, first+1, … in VALUES order, from
// LAST_INSERT_ID(); otherwise they are read back.
func (s *Store) sessionChecks(ctx context.Context) error {
	var iso string
	var mode, inc sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT @@tx_isolation, @@innodb_autoinc_lock_mode, @@auto_increment_increment").Scan(&iso, &mode, &inc); err != nil {
		return err
	}
	s.sessionRC = iso == "READ-COMMITTED"
	s.consecutiveSeq = mode.Valid && mode.Int64 <= 1 && inc.Valid && inc.Int64 == 1
	return nil
}
