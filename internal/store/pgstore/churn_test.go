package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
	"github.com/delayq/delayq/internal/store/storetest"
)

// churnSample is what a churn probe measures: the cost of one lease scan
// of the (drained) queue in shared buffers, which grows with the dead
// index entries and tuples the scan has to pass, and every table's size.
type churnSample struct {
	acked   int
	buffers int64   // shared buffers hit + read by one op_lease_due call
	leaseMS float64 // its execution time (secondary: load-dependent)
	tables  []pgTableSize
}

type pgTableSize struct {
	name              string
	heap, index, all  int64 // bytes: pg_relation_size, pg_indexes_size, pg_total_relation_size
	live, dead, vacs  int64 // n_live_tup, n_dead_tup, autovacuum_count + vacuum_count
	autoanalyzed      bool
	lastAutovacuumAgo string
}

func (c churnSample) total() (n int64) {
	for _, t := range c.tables {
		n += t.all
	}
	return n
}

func (c churnSample) size(table string) int64 {
	for _, t := range c.tables {
		if t.name == table {
			return t.all
		}
	}
	return -1
}

// probeChurn measures the store in schema on conn (a connection of the
// probe's own, so that op_lease_due's plans are cached as on the store's).
// The scan is the servers' lease: the heads of q_ready and q_scheduled.
func probeChurn(ctx context.Context, conn *pgx.Conn, schema, topic string, acked int) (churnSample, error) {
	c := churnSample{acked: acked}
	q := pgx.Identifier{schema}.Sanitize()
	// The last of three calls: the first ones plan the function's
	// statements and read the catalog.
	for range 3 {
		var out string
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM "+q+".op_lease_due(NULL, $1, 100, 30000, 'probe')", topic).Scan(&out); err != nil {
			return c, err
		}
		var plans []struct {
			Plan struct {
				Hit  int64   `json:"Shared Hit Blocks"`
				Read int64   `json:"Shared Read Blocks"`
				Rows int64   `json:"Actual Rows"`
				MS   float64 `json:"Actual Total Time"`
			}
		}
		if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
			return c, fmt.Errorf("EXPLAIN answered %q: %v", out, err)
		}
		if plans[0].Plan.Rows != 0 {
			return c, fmt.Errorf("the probe's lease found %d messages in a drained queue", plans[0].Plan.Rows)
		}
		c.buffers, c.leaseMS = plans[0].Plan.Hit+plans[0].Plan.Read, plans[0].Plan.MS
	}
	rows, err := conn.Query(ctx, `SELECT relname, pg_relation_size(relid), pg_indexes_size(relid), pg_total_relation_size(relid),
	       n_live_tup, n_dead_tup, autovacuum_count + vacuum_count, autoanalyze_count > 0,
	       coalesce(round(extract(epoch FROM now() - last_autovacuum))::text || ' s', '-')
	  FROM pg_stat_user_tables WHERE schemaname = $1 ORDER BY relname`, schema)
	if err != nil {
		return c, err
	}
	for rows.Next() {
		var t pgTableSize
		if err := rows.Scan(&t.name, &t.heap, &t.index, &t.all, &t.live, &t.dead, &t.vacs, &t.autoanalyzed, &t.lastAutovacuumAgo); err != nil {
			return c, err
		}
		c.tables = append(c.tables, t)
	}
	return c, rows.Err()
}

// churnTables are the tables whose sizes a run reports: the ones the
// workload writes.
var churnTables = []string{"message", "q_scheduled", "q_ready", "q_inflight", "tombstone", "topic_count"}

func logChurn(t testing.TB, samples []churnSample) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| acked | lease scan buffers | lease ms | all tables | ")
	for _, n := range churnTables {
		fmt.Fprintf(&b, "%s total (dead tup) | ", n)
	}
	b.WriteString("\n|---|---|---|---|")
	for range churnTables {
		b.WriteString("---|")
	}
	for _, c := range samples {
		fmt.Fprintf(&b, "\n| %d | %d | %.3f | %s | ", c.acked, c.buffers, c.leaseMS, kib(c.total()))
		for _, n := range churnTables {
			for _, tb := range c.tables {
				if tb.name == n {
					fmt.Fprintf(&b, "%s (%d) | ", kib(tb.all), tb.dead)
				}
			}
		}
	}
	if len(samples) > 0 {
		b.WriteString("\n\nlast sample, every table: name heap index total live dead vacuums last-autovacuum")
		for _, tb := range samples[len(samples)-1].tables {
			fmt.Fprintf(&b, "\n  %-22s %9s %9s %9s %9d %9d %4d %s", tb.name, kib(tb.heap), kib(tb.index), kib(tb.all), tb.live, tb.dead, tb.vacs, tb.lastAutovacuumAgo)
		}
	}
	t.Log(b.String())
}

func kib(n int64) string { return strconv.FormatInt(n/1024, 10) + " KiB" }

// runChurn drives n messages through a store at url/schema, probing every
// n/10, and returns the samples (fresh first).
// runChurn drives the churn through a store subscribed as a server's is
// (so it vacuums the queue tables itself); queueAutovacuumOff turns
// autovacuum off for the queue tables, leaving them to that vacuum alone.
func runChurn(t testing.TB, url, schema string, n, workers int, window int64, purgeEvery time.Duration, queueAutovacuumOff bool) []churnSample {
	t.Helper()
	s, err := pgstore.Open(ctx, pgstore.Options{URL: url, Schema: schema, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if queueAutovacuumOff {
		for _, tb := range queueTables {
			if _, err := conn.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, tb}.Sanitize()+" SET (autovacuum_enabled = false)"); err != nil {
				t.Fatal(err)
			}
		}
	}
	sctx, stop := context.WithCancel(ctx)
	subscribed := make(chan error, 1)
	go func() { subscribed <- s.Subscribe(sctx, nil, func(string, int64) {}) }()
	defer func() {
		stop()
		if err := <-subscribed; err != context.Canceled {
			t.Errorf("Subscribe: %v", err)
		}
	}()
	const topic = "churn"
	var samples []churnSample
	start := time.Now()
	acked, err := storetest.Churn(ctx, s, storetest.ChurnConfig{
		Topic: topic, Messages: n, Workers: workers, Window: window, PurgeEvery: purgeEvery, Ballast: 1000,
		Probe: func(ctx context.Context, phase, acked int) error {
			// Let the workers' backends report their table statistics
			// (PostgreSQL flushes them about once a second).
			time.Sleep(1500 * time.Millisecond)
			c, err := probeChurn(ctx, conn, schema, topic, acked)
			if err != nil {
				return err
			}
			samples = append(samples, c)
			var sizes []string
			for _, tb := range c.tables {
				if tb.all > 64<<10 {
					sizes = append(sizes, fmt.Sprintf("%s %s (%d dead)", tb.name, kib(tb.all), tb.dead))
				}
			}
			t.Logf("phase %d: %d acked in %s; lease scan %d buffers, %.3f ms; tables %s: %s", phase, acked, time.Since(start).Round(time.Second), c.buffers, c.leaseMS, kib(c.total()), strings.Join(sizes, ", "))
			return nil
		},
	})
	if err != nil {
		t.Fatalf("churn: %v (after %d acked)", err, acked)
	}
	return samples
}

// queueTables are the tables a server's store vacuums itself.
var queueTables = []string{"q_scheduled", "q_ready", "q_inflight"}

// TestChurnBounded is issue #15's proof at CI size: messages sent (half
// of them 20 ms ahead, through q_scheduled), leased with the servers'
// op_lease_due and acked in batches by several workers, tombstones purged
// after a short dedup window. The queue tables are vacuumed by the
// server's store alone (their autovacuum off); the other tables by
// autovacuum as configured by default but for its nap (1 s instead of 1
// min, so that a short run spans many of its rounds). After the churn a
// lease scan of the drained queue reads about as many buffers as on the
// fresh table, and the tables stop growing: dead tuples and index
// entries are reclaimed, not piled up.
func TestChurnBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("churn: -short")
	}
	srv := pgtest.Start(t)
	adm, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ALTER SYSTEM SET autovacuum_naptime = '1s'", "SELECT pg_reload_conf()"} {
		if _, err := adm.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer adm.Close(ctx)
	const n = 40000
	samples := runChurn(t, srv.URL(), "churn", n, 4, 1000, 500*time.Millisecond, true)
	logChurn(t, samples)
	if len(samples) != 11 {
		t.Fatalf("%d samples, want 11", len(samples))
	}
	fresh, mid, last := samples[0], samples[5], samples[10]
	if last.acked != n {
		t.Fatalf("%d acked, want %d", last.acked, n)
	}
	// The queue tables were vacuumed, by the store: with the server's
	// vacuum gone this fails, and so do the scans below (336 buffers with
	// no vacuum at all).
	for _, tb := range queueTables {
		var vacs, autovacs int64
		if err := adm.QueryRow(ctx, "SELECT vacuum_count, autovacuum_count FROM pg_stat_user_tables WHERE schemaname = 'churn' AND relname = $1", tb).Scan(&vacs, &autovacs); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: vacuumed %d times by the store, %d by autovacuum", tb, vacs, autovacs)
		if vacs == 0 || autovacs != 0 {
			t.Errorf("%s: vacuumed %d times by the store and %d by autovacuum; want some by the store, none by autovacuum (off)", tb, vacs, autovacs)
		}
	}
	// A scan that passed the run's dead index entries would read
	// hundreds of buffers (40,000 entries of q_ready_lease fill about
	// 200 leaf pages). What it may pass is what the churn left since
	// the store's last vacuum: a few dozen pages at most.
	for _, c := range samples[1:] {
		if c.buffers > fresh.buffers+64 {
			t.Errorf("after %d acked, a lease scan of the drained queue read %d buffers; fresh: %d", c.acked, c.buffers, fresh.buffers)
		}
	}
	// The second half of the run adds nothing lasting: no table the churn
	// writes ends more than 25 % + 2 MiB above its largest size in the
	// first half. The slack is what one phase (4,000 messages, each a few
	// row versions) can leave between two autovacuum visits when they fall
	// badly: `message` once went from 816 KiB to 2.6 MiB in the last phase
	// of a loaded run, and set-based sends move a phase in 1–2 s. Without
	// vacuum the second half adds 20,000 messages' versions to every
	// table: with autovacuum off, `message` went from 10.6 to 20.8 MiB,
	// `q_ready` from 4.4 to 8.6, `tombstone` 4.2 to 8.3, `topic_count` 2.9
	// to 6.0, and the lease scan read 336 buffers.
	for _, name := range churnTables {
		var peak int64 = -1 // the table's largest size in the first half
		for _, c := range samples[1:6] {
			peak = max(peak, c.size(name))
		}
		l := last.size(name)
		if peak < 0 || l < 0 {
			t.Fatalf("table %s not found in the samples", name)
		}
		if l > peak+peak/4+2<<20 {
			t.Errorf("table %s grew from at most %s until %d acked to %s at %d", name, kib(peak), mid.acked, kib(l), last.acked)
		}
	}
}

// TestChurnReport is the full-size run behind docs/benchmarks.md ("Table
// bloat"); it runs only when DELAYQ_CHURN_PG names a database (never the
// tests' own servers): the store's tables go in schema delayq_churn,
// dropped first.
//
//	DELAYQ_CHURN_PG=postgres://postgres@127.0.0.1:5432/test DELAYQ_CHURN_N=10000000 \
//	  go test -count=1 -timeout 3h -run 'TestChurnReport$' -v ./internal/store/pgstore
//
// DELAYQ_CHURN_N (default 1,000,000) messages, DELAYQ_CHURN_WORKERS
// (default 4) senders and as many leasers, DELAYQ_CHURN_WINDOW_MS
// (default 10000) the dedup window, purged every second.
func TestChurnReport(t *testing.T) {
	url := os.Getenv("DELAYQ_CHURN_PG")
	if url == "" {
		t.Skip("set DELAYQ_CHURN_PG to a database URL to run the churn report")
	}
	n, workers, window := envInt(t, "DELAYQ_CHURN_N", 1_000_000), envInt(t, "DELAYQ_CHURN_WORKERS", 4), envInt(t, "DELAYQ_CHURN_WINDOW_MS", 10000)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var settings string
	if err := conn.QueryRow(ctx, `SELECT version() || '; ' || string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings
	   WHERE name IN ('autovacuum', 'autovacuum_naptime', 'shared_buffers', 'synchronous_commit', 'fsync')`).Scan(&settings); err != nil {
		t.Fatal(err)
	}
	t.Log(settings)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS delayq_churn CASCADE"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	logChurn(t, runChurn(t, url, "delayq_churn", n, workers, int64(window), time.Second, false))
}

func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
