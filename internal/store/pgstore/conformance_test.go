package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	// A healthy database on a machine loaded by a parallel test run can
	// miss a short Options.Timeout at Open (the fault tests set one):
	// try again before calling it a failure.
	s, err := pgstore.Open(ctx, o)
	for i := 0; i < 4 && errors.Is(err, store.ErrUnavailable); i++ {
		time.Sleep(200 * time.Millisecond)
		s, err = pgstore.Open(ctx, o)
	}
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

// TestConformance runs the suite with TimeCaller: the SQL operations
// judge time by each call's Now.
func TestConformance(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openFresh(t, srv, false) })
}

func TestDueCounts(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.RunDueCounts(t, func(t *testing.T) store.Store { return openFresh(t, srv, false) })
}

// Migrating a schema takes ~50 objects and tens of milliseconds; the
// suites want hundreds of empty stores. A store the suites are done with
// (closed) gives its schema back, emptied, for the next one.
var (
	spareMu sync.Mutex
	spare   = map[bool][]string{} // fake clock? -> schemas
)

// openFresh opens a store on an empty schema: a spare one, or a new one.
// With dbClock the store judges by the database's clock (TimeDB), whose
// now_ms() the calls' Nows set; else by the calls' Nows (TimeCaller).
func openFresh(t *testing.T, srv *pgtest.Server, dbClock bool) store.Store {
	t.Helper()
	adm := adminPool(t, srv)
	spareMu.Lock()
	var schema string
	if n := len(spare[dbClock]); n > 0 {
		schema, spare[dbClock] = spare[dbClock][n-1], spare[dbClock][:n-1]
	}
	spareMu.Unlock()
	fresh := schema == ""
	if fresh {
		schema = srv.NewSchema()
	}
	s := openAt(t, srv, func(o *pgstore.Options) {
		o.Schema = schema
		o.Timeout = 10 * time.Second // the suites check semantics, not time bounds
		if !dbClock {
			o.TimeSource = pgstore.TimeCaller
		}
	})
	ts := &testStore{Store: s, t: t, last: -1, release: func() {
		q := pgx.Identifier{schema}.Sanitize()
		var b strings.Builder
		for _, table := range []string{"message", "q_scheduled", "q_ready", "q_inflight", "q_dead", "tombstone", "topic", "topic_count", "schedule", "rate_bucket"} {
			b.WriteString("DELETE FROM " + q + "." + table + ";")
		}
		if _, err := adm.Exec(ctx, b.String()); err != nil {
			return // not reused
		}
		spareMu.Lock()
		spare[dbClock] = append(spare[dbClock], schema)
		spareMu.Unlock()
	}}
	if dbClock {
		if fresh {
			ts.set = fakeClock(t, adm, schema)
		} else {
			ts.set = clockSetter(t, adm, schema)
		}
	}
	return ts
}
