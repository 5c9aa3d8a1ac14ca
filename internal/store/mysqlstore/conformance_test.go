package mysqlstore_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
	"github.com/delayq/delayq/internal/store/storetest"
)

var ctx = context.Background()

func TestMain(m *testing.M) { os.Exit(mysqltest.Main(m)) }

// open opens a store under a fresh table prefix, closed when t ends.
func open(t testing.TB, ts mysqlstore.TimeSource) *mysqlstore.Store {
	t.Helper()
	srv := mysqltest.Shared(t)
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: srv.NewPrefix(), TimeSource: ts})
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

// TestConformance runs the suite with TimeCaller: operations judge time
// by each call's Now.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, mysqlstore.TimeCaller) })
}

func TestDueCounts(t *testing.T) {
	storetest.RunDueCounts(t, func(t *testing.T) store.Store { return open(t, mysqlstore.TimeCaller) })
}

func TestModel(t *testing.T) {
	storetest.RunModel(t, func(t *testing.T) store.Store { return open(t, mysqlstore.TimeCaller) })
}
