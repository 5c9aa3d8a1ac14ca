package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/delayq/delayq/internal/store"
)

// TestExplainNewerFormat: a store's refusal of a newer format gains which
// build refused it and what to do; other errors pass through unchanged.
func TestExplainNewerFormat(t *testing.T) {
	refused := fmt.Errorf("open data directory d: pebblestore: d is in store format 2, this build reads format 1: %w", store.ErrNewerFormat)
	err := explainNewerFormat(refused)
	if !errors.Is(err, store.ErrNewerFormat) {
		t.Fatalf("%v no longer wraps store.ErrNewerFormat", err)
	}
	for _, want := range []string{"store format 2, this build reads format 1", "this is delayq ", "changed nothing", "restore the backup", "Upgrade and rollback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	other := errors.New("open data directory d: permission denied")
	if got := explainNewerFormat(other); got != other {
		t.Errorf("another error was changed: %v", got)
	}
}

// TestRefusedAccess: the drivers' answers that mean "these credentials or
// this database are refused" are not waited for; being unreachable is.
func TestRefusedAccess(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("open: %w: %w", store.ErrUnavailable, err) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{wrap(&pgconn.PgError{Code: "28P01"}), true},
		{wrap(&pgconn.PgError{Code: "28000"}), true},
		{wrap(&pgconn.PgError{Code: "3D000"}), true},
		{wrap(&pgconn.PgError{Code: "57P03"}), false}, // the database system is starting up
		{wrap(&mysql.MySQLError{Number: 1045}), true},
		{wrap(&mysql.MySQLError{Number: 1049}), true},
		{wrap(&mysql.MySQLError{Number: 1040}), false}, // too many connections
		{wrap(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")), false},
	} {
		if got := refusedAccess(tc.err); got != tc.want {
			t.Errorf("refusedAccess(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
