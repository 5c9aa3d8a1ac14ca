package mysqlstore_test

import (
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestPing: readiness's ping answers nil while the database and the
// store's tables answer, and ErrClosed after Close.
func TestPing(t *testing.T) {
	s := open(t, mysqlstore.TimeDB)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	_ = s.Close()
	if err := s.Ping(ctx); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Ping after Close: %v, want ErrClosed", err)
	}
}
