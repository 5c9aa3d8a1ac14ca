package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/buildinfo"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/pebblestore"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/redisstore"
)

// openStore opens the store cfg names, and describes it for logs (URLs
// with their passwords hidden).
func openStore(ctx context.Context, cfg *Config, log *slog.Logger) (store.Store, string, error) {
	n := 0
	for _, v := range []string{cfg.RedisURL, cfg.PostgresURL, cfg.MySQLURL} {
		if v != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, "", errors.New("server: give only one of RedisURL, PostgresURL and MySQLURL")
	case cfg.MySQLURL != "":
		st, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: cfg.MySQLURL, Prefix: cfg.MySQLPrefix, NoMigrate: cfg.NoMigrate, Timeout: cfg.SQLTimeout, Logger: log})
		if err != nil {
			return nil, "", fmt.Errorf("open mysql %s: %w", mysqlstore.RedactURL(cfg.MySQLURL), err)
		}
		prefix := cfg.MySQLPrefix
		if prefix == "" {
			prefix = mysqlstore.DefaultPrefix
		}
		return st, "mysql " + mysqlstore.RedactURL(cfg.MySQLURL) + " prefix " + prefix, nil
	case cfg.PostgresURL != "":
		st, err := pgstore.Open(ctx, pgstore.Options{URL: cfg.PostgresURL, Schema: cfg.PostgresSchema, NoMigrate: cfg.NoMigrate, Timeout: cfg.SQLTimeout, Logger: log})
		if err != nil {
			return nil, "", fmt.Errorf("open postgres %s: %w", pgstore.RedactURL(cfg.PostgresURL), err)
		}
		return st, "postgres " + pgstore.RedactURL(cfg.PostgresURL) + " schema " + st.Schema(), nil
	case cfg.RedisURL != "":
		redis.SetLogger(slogRedis{log})
		st, err := redisstore.Open(ctx, redisstore.Options{URL: cfg.RedisURL, Partitions: cfg.RedisPartitions, Logger: log, AllowEviction: cfg.RedisAllowEviction})
		if err != nil {
			if redisstore.EvictionRefused(err) {
				err = renamed(err, redisstore.AllowEvictionOption, RedisAllowEvictionOption)
			}
			return nil, "", fmt.Errorf("open redis %s: %w", redisstore.RedactURL(cfg.RedisURL), err)
		}
		return st, "redis " + redisstore.RedactURL(cfg.RedisURL), nil
	case cfg.DataDir == "":
		return nil, "", errors.New("server: Config names no store: give DataDir, RedisURL, PostgresURL or MySQLURL")
	}
	st, err := pebblestore.Open(cfg.DataDir, pebblestore.Options{Logger: log})
	if err != nil {
		return nil, "", fmt.Errorf("open data directory %s: %w", cfg.DataDir, err)
	}
	return st, "data " + cfg.DataDir, nil
}

// DefaultStoreWait is Config.StoreWait's default.
const DefaultStoreWait = time.Minute

// Backoff between attempts to open an unavailable store.
const (
	firstStoreRetry = 250 * time.Millisecond
	maxStoreRetry   = 5 * time.Second
)

// openStoreWaiting is openStore, retried while the store is unavailable
// for up to cfg.StoreWait. Servers and their stores start in any order
// (a host booting, a Redis loading a large AOF, a database restarting):
// failing at once left that to the supervisor, whose restart limits
// (systemd's five starts in ten seconds, Kubernetes' growing back-off)
// could leave the server down, or late, after the store came back.
func openStoreWaiting(ctx context.Context, cfg *Config, log *slog.Logger) (store.Store, string, error) {
	start := time.Now()
	retry := firstStoreRetry
	for attempt := 1; ; attempt++ {
		st, where, err := openStore(ctx, cfg, log)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || refusedAccess(err) || cfg.StoreWait <= 0 {
			if err == nil && attempt > 1 {
				log.Info("store open", "store", where, "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
			}
			return st, where, err
		}
		left := cfg.StoreWait - time.Since(start)
		if left <= 0 {
			return nil, "", fmt.Errorf("%w (still unavailable after %d attempts in %s; the wait is --store-wait, Config.StoreWait)",
				err, attempt, time.Since(start).Round(time.Second))
		}
		wait := min(retry, left)
		log.Warn("store unavailable; retrying", "err", err, "attempt", attempt, "retry_in", wait, "gives_up_in", left.Round(time.Second))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, "", fmt.Errorf("%w (stopped while waiting for the store: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
		retry = min(2*retry, maxStoreRetry)
	}
}

// refusedAccess reports whether the store's server answered but refused
// these credentials or this database: a configuration error that waiting
// does not fix, though the stores report it as unavailable (a password
// can be changed at run time; to a running server it is an outage).
func refusedAccess(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 28: invalid authorization (a role that does not exist, a
		// wrong password); 3D000: no such database.
		return strings.HasPrefix(pe.Code, "28") || pe.Code == "3D000"
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1049, 1698: // access denied to the database, for the user; unknown database; no password for root over TCP
			return true
		}
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM")
	}
	return false
}

// explainNewerFormat adds, to a store's refusal of a format newer than
// this build's (a rollback), which build refused and what to do.
func explainNewerFormat(err error) error {
	if !errors.Is(err, store.ErrNewerFormat) {
		return err
	}
	bi := buildinfo.Get()
	return fmt.Errorf("%w; this is delayq %s (revision %s), which cannot read it and changed nothing: "+
		"run the delayq version that wrote it (or a later one), or restore the backup taken before the upgrade "+
		"(docs/operations.md, \"Upgrade and rollback\")", err, bi.Version, cmp.Or(bi.Short(), "unknown"))
}

// slogRedis routes go-redis's own log lines (reconnects, pool errors)
// through our logger instead of raw stderr.
type slogRedis struct{ log *slog.Logger }

func (l slogRedis) Printf(ctx context.Context, format string, v ...any) {
	l.log.Debug("redis client", "detail", fmt.Sprintf(format, v...)) // the store reports failures itself
}

// backupFunc is the store's online backup for the API, or nil when the
// store has none of its own.
func (s *Server) backupFunc() func(ctx context.Context, w io.Writer) error {
	if _, ok := s.st.(*pebblestore.Store); !ok {
		return nil
	}
	return func(ctx context.Context, w io.Writer) error {
		_, _, err := s.Backup(ctx, w)
		return err
	}
}

// ErrNoBackup is Backup's error on stores backed up with their own tools.
var ErrNoBackup = errors.New("server: the store has no online backup of its own: back up Redis, PostgreSQL or MySQL with their own tools")

// Backup writes an online, consistent backup of the embedded store to w
// as a tar archive (what GET /v1/admin/backup and `delayq backup` serve):
// every write acknowledged before the call is in it, and the server keeps
// serving. Restore by extracting it into an empty data directory. It
// reports the archive's file count and bytes; ErrNoBackup on other stores.
func (s *Server) Backup(ctx context.Context, w io.Writer) (files int, bytes int64, err error) {
	st, ok := s.st.(*pebblestore.Store)
	if !ok {
		return 0, 0, ErrNoBackup
	}
	info, err := st.Backup(ctx, w)
	if err == nil {
		s.log.Info("backup written", "files", info.Files, "bytes", info.Bytes)
	}
	return info.Files, info.Bytes, err
}

// RedisAllowEvictionOption is how New's refusal of an evicting Redis names
// the override; a program with its own name for it (delayq serve's
// --redis-allow-eviction) replaces it when EvictionRefused(err).
const RedisAllowEvictionOption = "Config.RedisAllowEviction"

// EvictionRefused reports whether err is New's refusal to run on a Redis
// whose maxmemory-policy may evict keys (Config.RedisAllowEviction
// overrides it, unsafely).
func EvictionRefused(err error) bool { return redisstore.EvictionRefused(err) }

// renamed is err with one option name in its message replaced, still
// matching what err matches.
func renamed(err error, from, to string) error {
	return &renamedError{msg: strings.Replace(err.Error(), from, to, 1), err: err}
}

type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }
