package mysqlstore_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// oldSchema is a new prefix on the shared server with its tables as
// schema version left them (makeSchema), and a connection pool to it.
func oldSchema(t *testing.T, version int) (*mysqltest.Server, string, *sql.DB) {
	t.Helper()
	srv := mysqltest.Shared(t)
	prefix := srv.NewPrefix()
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	makeSchema(t, db, prefix, version)
	return srv, prefix, db
}

// makeSchema builds prefix's tables as migrations 1 to version left them,
// as that version's servers recorded it, without this build's Migrate.
func makeSchema(t *testing.T, db *sql.DB, prefix string, version int) {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	stmts := []string{"CREATE TABLE `" + prefix + "schema_version` (version INT NOT NULL PRIMARY KEY, applied TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB"}
	for _, f := range files {
		num, _, _ := strings.Cut(filepath.Base(f), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			t.Fatal(err)
		}
		if v > version {
			continue
		}
		b, err := os.ReadFile(f) // #nosec G304 -- the package's own migrations
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range strings.Split(string(b), "\n--;\n") {
			if st = strings.TrimSpace(strings.ReplaceAll(st, "{{p}}", prefix)); st != "" {
				stmts = append(stmts, st)
			}
		}
		stmts = append(stmts, "INSERT INTO `"+prefix+"schema_version` (version) VALUES ("+strconv.Itoa(v)+")")
	}
	for _, st := range stmts {
		if _, err := db.Exec(st); err != nil {
			t.Fatalf("schema %d: %.80s: %v", version, st, err)
		}
	}
}

// migrateTwice migrates prefix's tables from schema version from to this
// build's, then again as if the first run had stopped before recording
// the versions after from: a migration must run again without harm.
func migrateTwice(t *testing.T, db *sql.DB, srv *mysqltest.Server, prefix string, from int) {
	t.Helper()
	for round := range 2 {
		if round == 1 {
			if _, err := db.Exec("DELETE FROM `"+prefix+"schema_version` WHERE version > ?", from); err != nil {
				t.Fatal(err)
			}
		}
		got, to, err := mysqlstore.Migrate(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix})
		if err != nil || got != from || to != mysqlstore.SchemaVersion() || to <= from {
			t.Fatalf("round %d: Migrate %d -> %d, %v; want %d -> SchemaVersion %d", round, got, to, err, from, mysqlstore.SchemaVersion())
		}
	}
}
