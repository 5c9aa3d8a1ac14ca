package pgstore_test

import (
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestPing: readiness's ping answers nil while the database and the
// store's schema answer, an error once the schema is gone (the query
// names what is missing), and ErrClosed after Close.
func TestPing(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := adminPool(t, srv).Exec(ctx, "DROP SCHEMA "+s.Schema()+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with the schema dropped: nil, want an error")
	}
	_ = s.Close()
	if err := s.Ping(ctx); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Ping after Close: %v, want ErrClosed", err)
	}
}
