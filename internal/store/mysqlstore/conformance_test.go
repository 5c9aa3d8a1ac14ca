package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
	"github.com/delayq/delayq/internal/store/storetest"
)

var ctx = context.Background()

func TestMain(m *testing.M) {
	code := mysqltest.Main(m)
	if adminDB != nil {
		_ = adminDB.Close()
	}
	// After the pools are closed: a store that leaves a goroutine behind
	// (a listener, a folder, a pool's opener) fails the package.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// Migrating a prefix takes a dozen DDL statements; the suites want
// hundreds of empty stores. A test done with its store gives the prefix
// back, emptied, for the next one.
var (
	spareMu sync.Mutex
	spare   []string
	adminDB *sql.DB
)

// open opens a store on empty tables (a spare prefix, or a new one),
// closed when t ends.
func open(t testing.TB, ts mysqlstore.TimeSource) *mysqlstore.Store {
	t.Helper()
	srv := mysqltest.Shared(t)
	spareMu.Lock()
	var prefix string
	if n := len(spare); n > 0 {
		prefix, spare = spare[n-1], spare[:n-1]
	}
	if adminDB == nil {
		db, err := sql.Open("mysql", srv.DSN())
		if err != nil {
			spareMu.Unlock()
			t.Fatal(err)
		}
		adminDB = db
	}
	spareMu.Unlock()
	reused := prefix != ""
	if !reused {
		prefix = srv.NewPrefix()
	}
	// A generous per-call timeout: the suites' concurrent cases queue many
	// transactions on one topic's row, and the test machine is shared.
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, TimeSource: ts, Timeout: 15 * time.Second, NoMigrate: reused})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
		var b strings.Builder
		for _, table := range []string{"message", "q_scheduled", "q_ready", "q_inflight", "q_dead", "tombstone", "topic", "topic_count", "schedule", "rate_bucket"} {
			b.WriteString("DELETE FROM `" + prefix + table + "`;")
		}
		if _, err := adminDB.Exec(b.String()); err != nil {
			return // not reused
		}
		spareMu.Lock()
		spare = append(spare, prefix)
		spareMu.Unlock()
	})
	return s
}

// TestConformance runs the suite with TimeCaller: operations judge time
// by each call's Now.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, mysqlstore.TimeCaller) })
}

// TestLeaseDue: the store.NextDueLeaser calls (a due lease taking
// scheduled messages straight to inflight; the grace promotion).
func TestLeaseDue(t *testing.T) {
	storetest.RunDueLeaser(t, func(t *testing.T) store.Store { return open(t, mysqlstore.TimeCaller) })
}

func TestDueCounts(t *testing.T) {
	storetest.RunDueCounts(t, func(t *testing.T) store.Store { return open(t, mysqlstore.TimeCaller) })
}
