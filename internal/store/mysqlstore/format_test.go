package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// TestOpenRefusesNewerSchema is a rollback: tables whose schema version
// is newer than this build's (as a later delayq would leave them) are
// refused at Open, migrating or not, with an error naming both versions
// and wrapping store.ErrNewerFormat, and nothing is written.
func TestOpenRefusesNewerSchema(t *testing.T) {
	srv := mysqltest.Shared(t)
	ctx := context.Background()
	prefix := srv.NewPrefix()
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "INSERT INTO "+prefix+"schema_version (version) VALUES (999)"); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var s sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT GROUP_CONCAT(v ORDER BY v SEPARATOR ';') FROM (
			SELECT CONCAT('v', version) AS v FROM `+prefix+`schema_version
			UNION ALL SELECT CONCAT('t:', table_name, ':', column_name) FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name LIKE ?) x`, prefix+"%").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s.String
	}
	before := snapshot()
	if !strings.Contains(before, "v999") || !strings.Contains(before, "t:"+prefix) {
		t.Fatalf("snapshot %q lacks the version row or the tables", before)
	}
	newer := fmt.Sprintf("at version 999, newer than this build's %d", mysqlstore.SchemaVersion())
	for _, noMigrate := range []bool{false, true} {
		_, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, NoMigrate: noMigrate})
		if !errors.Is(err, store.ErrNewerFormat) || !strings.Contains(err.Error(), newer) {
			t.Errorf("NoMigrate %v: %v; want store.ErrNewerFormat saying %q", noMigrate, err, newer)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("the refused Open changed the schema:\nbefore %s\nafter  %s", before, after)
	}
}
