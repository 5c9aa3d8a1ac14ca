package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
	"github.com/delayq/delayq/internal/store/storetest"
)

var ctx = context.Background()

// openAt opens a store in a fresh schema of srv, closing it when t ends.
func openAt(t testing.TB, srv *pgtest.Server, mod ...func(*pgstore.Options)) *pgstore.Store {
	t.Helper()
	o := pgstore.Options{URL: srv.URL(), Schema: srv.NewSchema()}
	for _, m := range mod {
		m(&o)
	}
	s, err := pgstore.Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func callerTime(o *pgstore.Options) { o.TimeSource = pgstore.TimeCaller }

// TestConformance runs the suite with TimeCaller: the SQL operations
// judge time by each call's Now.
func TestConformance(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openAt(t, srv, callerTime) })
}

func TestModel(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.RunModel(t, func(t *testing.T) store.Store { return openAt(t, srv, callerTime) })
}

func TestDueCounts(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.RunDueCounts(t, func(t *testing.T) store.Store { return openAt(t, srv, callerTime) })
}
