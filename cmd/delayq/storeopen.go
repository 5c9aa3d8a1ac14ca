package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/pebblestore"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/redisstore"
)

// openStore opens the Redis store when --redis is given, the PostgreSQL
// store when --postgres is, the MySQL store when --mysql is, else the embedded store in --data.
func openStore(ctx context.Context, o *serveOpts, log *slog.Logger) (store.Store, string, error) {
	n := 0
	for _, v := range []string{o.redis, o.postgres, o.mysql} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return nil, "", errors.New("give one of --redis, --postgres and --mysql")
	}
	if o.mysql != "" {
		st, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: o.mysql, Prefix: o.mysqlPrefix, NoMigrate: !o.mysqlMigrate, Logger: log})
		if err != nil {
			return nil, "", fmt.Errorf("open mysql %s: %w", mysqlstore.RedactURL(o.mysql), err)
		}
		return st, "mysql " + mysqlstore.RedactURL(o.mysql) + " prefix " + o.mysqlPrefix, nil
	}
	if o.postgres != "" {
		st, err := pgstore.Open(ctx, pgstore.Options{URL: o.postgres, Schema: o.postgresSchema, NoMigrate: !o.postgresMigrate, Logger: log})
		if err != nil {
			return nil, "", fmt.Errorf("open postgres %s: %w", pgstore.RedactURL(o.postgres), err)
		}
		return st, "postgres " + pgstore.RedactURL(o.postgres) + " schema " + st.Schema(), nil
	}
	if o.redis != "" {
		redis.SetLogger(slogRedis{log})
		st, err := redisstore.Open(ctx, redisstore.Options{URL: o.redis, Partitions: o.redisPartitions, Logger: log, AllowEviction: o.redisAllowEviction})
		if err != nil {
			return nil, "", fmt.Errorf("open redis %s: %w", redactURL(o.redis), err)
		}
		return st, "redis " + redactURL(o.redis), nil
	}
	st, err := pebblestore.Open(o.data, pebblestore.Options{Logger: log})
	if err != nil {
		return nil, "", fmt.Errorf("open data directory %s: %w", o.data, err)
	}
	return st, "data " + o.data, nil
}

// redactURL hides passwords in a Redis URL for logs and errors (also
// sentinel_password= and the host lists url.Parse refuses).
func redactURL(raw string) string { return redisstore.RedactURL(raw) }

// slogRedis routes go-redis's own log lines (reconnects, pool errors)
// through our logger instead of raw stderr.
type slogRedis struct{ log *slog.Logger }

func (l slogRedis) Printf(ctx context.Context, format string, v ...any) {
	l.log.Debug("redis client", "detail", fmt.Sprintf(format, v...)) // the store reports failures itself
}
