package mysqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

// Numbered SQL files, applied in order; each records its version in
// <prefix>schema_version once all its statements ran. A released file is
// never edited: a change is a new file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	stmts   []string
}

func migrations(prefix string) []migration {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	var out []migration
	for _, f := range files {
		num, _, _ := strings.Cut(path.Base(f), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			panic("mysqlstore: migration " + f + " does not start with a number")
		}
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			panic(err)
		}
		m := migration{version: v}
		for _, st := range strings.Split(string(b), "\n--;\n") {
			if st = strings.TrimSpace(strings.ReplaceAll(st, "{{p}}", prefix)); st != "" {
				m.stmts = append(m.stmts, st)
			}
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out
}

// SchemaVersion is the schema version this build needs.
func SchemaVersion() int { return len(migrations("")) }

// Migrate opens the database of o, creates or upgrades the tables, and
// closes it; it answers the versions before and after.
func Migrate(ctx context.Context, o Options) (from, to int, err error) {
	o.NoMigrate = true
	o.skipCheck = true
	s, err := Open(ctx, o)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	return s.migrate(ctx)
}

// migrate creates or upgrades the schema under the named lock
// "<database>.<prefix>migrate" (GET_LOCK), so that servers starting
// together migrate once.
func (s *Store) migrate(ctx context.Context) (from, to int, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, 0, s.wrap(err)
	}
	defer conn.Close()
	var got sql.NullInt64
	lock := s.p + "migrate"
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT(DATABASE(), '.', ?), 60)", lock).Scan(&got); err != nil {
		return 0, 0, s.wrap(err)
	}
	if !got.Valid || got.Int64 != 1 {
		return 0, 0, fmt.Errorf("mysqlstore: migrate: could not take lock %q within 60s: %w", lock, store.ErrUnavailable)
	}
	defer conn.ExecContext(context.Background(), "SELECT RELEASE_LOCK(CONCAT(DATABASE(), '.', ?))", lock) //nolint:errcheck // the lock also ends with the session
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.t("schema_version")+" (version INT NOT NULL PRIMARY KEY, applied TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB"); err != nil {
		return 0, 0, s.wrap(err)
	}
	cur, err := s.version(ctx, conn)
	if err != nil {
		return 0, 0, err
	}
	ms := migrations(s.p)
	if cur > len(ms) {
		return cur, cur, tooNew(s.p, cur)
	}
	for _, m := range ms[cur:] {
		for _, st := range m.stmts {
			if _, err := conn.ExecContext(ctx, st); err != nil {
				return cur, cur, fmt.Errorf("mysqlstore: migration %d: %w", m.version, s.wrap(err))
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+s.t("schema_version")+" (version) VALUES (?)", m.version); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
			return cur, cur, s.wrap(err)
		}
	}
	return cur, len(ms), nil
}

func (s *Store) version(ctx context.Context, q querier) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, "SELECT MAX(version) FROM "+s.t("schema_version")).Scan(&v); err != nil {
		return 0, s.wrap(err)
	}
	return int(v.Int64), nil
}

func (s *Store) checkVersion(ctx context.Context) error {
	v, err := s.version(ctx, s.db)
	if err != nil {
		var me interface{ Error() string }
		if errors.As(err, &me) && strings.Contains(err.Error(), "1146") {
			return fmt.Errorf("mysqlstore: no schema with prefix %q: run `delayq migrate`", s.p)
		}
		return err
	}
	if want := SchemaVersion(); v > want {
		return tooNew(s.p, v)
	} else if v != want {
		return fmt.Errorf("mysqlstore: schema version %d, this build needs %d: run `delayq migrate`", v, want)
	}
	return nil
}

func tooNew(prefix string, v int) error {
	return fmt.Errorf("mysqlstore: schema with prefix %q is at version %d, newer than this build's %d: %w", prefix, v, SchemaVersion(), store.ErrNewerFormat)
}
