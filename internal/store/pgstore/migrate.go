package pgstore

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
)

// The schema is created and upgraded by numbered SQL files, applied in
// order, each in one transaction that also records it in
// <schema>.delayq_schema_version. A file is never edited once released: a
// change is a new file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations lists the embedded files, by version.
func migrations() []migration {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		panic(err) // a constant pattern
	}
	var out []migration
	for _, f := range files {
		base := path.Base(f)
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			panic("pgstore: migration file " + base + " does not start with a number")
		}
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			panic(err)
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			panic(fmt.Sprintf("pgstore: migration %s: want version %d", m.name, i+1))
		}
	}
	return out
}

// SchemaVersion is the schema version this build works with.
func SchemaVersion() int { return len(migrations()) }

// migrationTimeout bounds a migration as a whole, including the wait for
// another server that holds the migration lock.
const migrationTimeout = 2 * time.Minute

// Migrate creates or upgrades the schema named by opts (URL or Pool,
// Schema) to SchemaVersion and answers the version before and after. It
// is what Open does unless NoMigrate; `delayq migrate` runs it alone.
func Migrate(ctx context.Context, opts Options) (from, to int, err error) {
	schema := cmp.Or(opts.Schema, DefaultSchema)
	if err := checkSchema(schema); err != nil {
		return 0, 0, err
	}
	timeout := cmp.Or(opts.Timeout, DefaultTimeout)
	var cfg *pgx.ConnConfig
	if opts.Pool != nil {
		cfg = opts.Pool.Config().ConnConfig.Copy()
	} else {
		pc, err := poolConfig(opts.URL, timeout)
		if err != nil {
			return 0, 0, err
		}
		cfg = pc.ConnConfig
	}
	return migrateTo(ctx, cfg, schema, timeout)
}

func migrate(ctx context.Context, cfg *pgx.ConnConfig, schema string, timeout time.Duration) error {
	_, _, err := migrateTo(ctx, cfg, schema, timeout)
	return err
}

// migrateTo applies the missing migrations on a connection of its own,
// holding a session advisory lock (released with the connection, even if
// this process dies), so that servers starting together migrate once.
func migrateTo(ctx context.Context, cfg *pgx.ConnConfig, schema string, timeout time.Duration) (from, to int, err error) {
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	q := pgx.Identifier{schema}.Sanitize()
	all := migrations()
	cctx, ccancel := context.WithTimeout(ctx, timeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	ccancel()
	if err != nil {
		return 0, 0, migrateErr("connect", err, cfg)
	}
	defer conn.Close(context.Background())

	from, err = readVersion(ctx, conn, schema)
	if err != nil {
		return 0, 0, migrateErr("read schema version", err, cfg)
	}
	if from == len(all) {
		return from, from, nil
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended('delayq.migrate.' || $1, 0))", schema); err != nil {
		return from, from, migrateErr("take the migration lock", err, cfg)
	}
	// Another server may have migrated while this one waited.
	if from, err = readVersion(ctx, conn, schema); err != nil {
		return 0, 0, migrateErr("read schema version", err, cfg)
	}
	if from > len(all) {
		return from, from, tooNew(schema, from)
	}
	if from == 0 {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
			return 0, 0, migrateErr("look for the schema", err, cfg)
		}
		// CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the
		// database even when the schema exists; a DBA may have made it.
		if !exists {
			if _, err := conn.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
				return 0, 0, migrateErr("create schema", err, cfg)
			}
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+q+`.delayq_schema_version (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return 0, 0, migrateErr("create the version table", err, cfg)
		}
	}
	to = from
	for _, m := range all[from:] {
		sql := strings.NewReplacer("__SCHEMA__", q, "__CHANNEL__", schema+".notify").Replace(m.sql)
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+q+".delayq_schema_version (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return from, to, migrateErr("apply migration "+m.name, err, cfg)
		}
		to = m.version
	}
	return from, to, nil
}

// readVersion answers the schema's version: 0 when it has no version
// table (a new schema).
func readVersion(ctx context.Context, conn *pgx.Conn, schema string) (int, error) {
	table := pgx.Identifier{schema, "delayq_schema_version"}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table).Scan(&v)
	return v, err
}

// checkVersion fails unless the schema is at this build's version (Open
// with NoMigrate).
func (s *Store) checkVersion(ctx context.Context) (err error) {
	ctx, end := s.bound(ctx)
	defer end(&err)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.fail("read schema version", redactErr(err, s.connCfg.ConnString()))
	}
	defer conn.Release()
	v, err := readVersion(ctx, conn.Conn(), s.schema)
	if err != nil {
		return s.fail("read schema version", err)
	}
	switch want := SchemaVersion(); {
	case v == 0:
		return fmt.Errorf("pgstore: schema %q has no delayq tables: run `delayq migrate` (or start without --postgres-migrate=false)", s.schema)
	case v < want:
		return fmt.Errorf("pgstore: schema %q is at version %d, this build needs %d: run `delayq migrate`", s.schema, v, want)
	case v > want:
		return tooNew(s.schema, v)
	}
	return nil
}

func tooNew(schema string, v int) error {
	return fmt.Errorf("pgstore: schema %q is at version %d, newer than this build's %d: %w", schema, v, SchemaVersion(), store.ErrNewerFormat)
}

func migrateErr(op string, err error, cfg *pgx.ConnConfig) error {
	err = redactErr(err, cfg.ConnString())
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) && !strings.HasPrefix(pe.SQLState(), "08") && !strings.HasPrefix(pe.SQLState(), "57") && !strings.HasPrefix(pe.SQLState(), "53") {
		return fmt.Errorf("pgstore: migrate: %s: %w", op, err) // the database answered: not a fault to retry
	}
	return fmt.Errorf("pgstore: migrate: %s: %w: %w", op, store.ErrUnavailable, err)
}
