package mysqlstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
	"github.com/delayq/delayq/internal/store/storetest"
)

// churnSample is what a churn probe measures: the InnoDB pages one lease
// scan of the drained queue touches (ANALYZE's r_engine_stats), which
// grows with the delete-marked index records purge has not removed yet,
// every table's size, and the purge backlog.
type churnSample struct {
	acked   int
	pages   int64   // pages accessed by one lease scan
	leaseMS float64 // its time (secondary: load-dependent)
	history int64   // History list length: undo logs not yet purged
	tables  []myTableSize
}

type myTableSize struct {
	name                    string
	data, index, free, file int64 // bytes: data_length, index_length, data_free; the .ibd file
	rows                    int64 // estimate
}

// size is a table's data + index length: the pages its records take,
// delete-marked ones included (what purge lag and bloat grow). The .ibd
// file is not the measure: InnoDB extends it in chunks and never shrinks
// it, so on CI's small tables one extension reads as 50 % growth.
func (c churnSample) size(table string) int64 {
	for _, t := range c.tables {
		if t.name == table {
			return t.data + t.index
		}
	}
	return -1
}

func (c churnSample) total() (n int64) {
	for _, t := range c.tables {
		n += t.file
	}
	return n
}

var historyRE = regexp.MustCompile(`History list length (\d+)`)

// probeChurn measures the store of prefix on conn (a connection of the
// probe's own). Table sizes are the .ibd files (which InnoDB never
// shrinks: a table that reuses its freed pages keeps its size) and the
// statistics after ANALYZE TABLE.
func probeChurn(ctx context.Context, conn *sql.Conn, s *mysqlstore.Store, prefix, topic string, acked int) (churnSample, error) {
	c := churnSample{acked: acked}
	pick := mysqlstore.LeasePickSQL(s)
	for range 3 { // the last of three: the first may read pages from disk
		tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return c, err
		}
		var out string
		err = tx.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+pick, topic, time.Now().UnixMilli()+3_600_000, 100).Scan(&out)
		_ = tx.Rollback()
		if err != nil {
			return c, err
		}
		var a struct {
			QueryBlock struct {
				MS  float64 `json:"r_total_time_ms"`
				Tab []struct {
					Table struct {
						Rows  float64 `json:"r_rows"`
						Stats struct {
							Pages int64 `json:"pages_accessed"`
						} `json:"r_engine_stats"`
					} `json:"table"`
				} `json:"nested_loop"`
			} `json:"query_block"`
		}
		// The pick's tables: q_ready, then message (its rows by primary
		// key, none for a drained queue).
		if err := json.Unmarshal([]byte(out), &a); err != nil || len(a.QueryBlock.Tab) == 0 {
			return c, fmt.Errorf("ANALYZE answered %q: %v", out, err)
		}
		if r := a.QueryBlock.Tab[0].Table.Rows; r != 0 {
			return c, fmt.Errorf("the probe's lease scan found %v messages in a drained queue", r)
		}
		c.pages, c.leaseMS = 0, a.QueryBlock.MS
		for _, tb := range a.QueryBlock.Tab {
			c.pages += tb.Table.Stats.Pages
		}
	}
	var typ, name, status string
	if err := conn.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return c, err
	}
	m := historyRE.FindStringSubmatch(status)
	if m == nil {
		return c, fmt.Errorf("no History list length in SHOW ENGINE INNODB STATUS")
	}
	c.history, _ = strconv.ParseInt(m[1], 10, 64)
	rows, err := conn.QueryContext(ctx, "SELECT table_name FROM information_schema.TABLES WHERE table_schema = DATABASE() AND table_name LIKE ?", strings.ReplaceAll(prefix, "_", `\_`)+"%")
	if err != nil {
		return c, err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return c, err
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	for _, n := range names {
		r, err := conn.QueryContext(ctx, "ANALYZE TABLE `"+n+"`") // #nosec G202 -- a table name read from information_schema
		if err != nil {
			return c, err
		}
		for r.Next() {
		}
		r.Close()
	}
	rows, err = conn.QueryContext(ctx, `SELECT t.table_name, t.data_length, t.index_length, t.data_free, t.table_rows, coalesce(s.file_size, 0)
	  FROM information_schema.TABLES t LEFT JOIN information_schema.INNODB_SYS_TABLESPACES s ON s.name = concat(t.table_schema, '/', t.table_name)
	 WHERE t.table_schema = DATABASE() AND t.table_name LIKE ? ORDER BY t.table_name`, strings.ReplaceAll(prefix, "_", `\_`)+"%")
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var t myTableSize
		if err := rows.Scan(&t.name, &t.data, &t.index, &t.free, &t.rows, &t.file); err != nil {
			return c, err
		}
		t.name = strings.TrimPrefix(t.name, prefix)
		c.tables = append(c.tables, t)
	}
	return c, rows.Err()
}

// churnTables are the tables the workload writes.
var churnTables = []string{"message", "q_scheduled", "q_ready", "q_inflight", "tombstone", "topic"}

func kib(n int64) string { return strconv.FormatInt(n/1024, 10) + " KiB" }

func logChurn(t testing.TB, samples []churnSample) {
	var b strings.Builder
	b.WriteString("\n| acked | lease scan pages | lease ms | history list | all .ibd | ")
	for _, n := range churnTables {
		fmt.Fprintf(&b, "%s .ibd (data+index) | ", n)
	}
	b.WriteString("\n|---|---|---|---|---|")
	for range churnTables {
		b.WriteString("---|")
	}
	for _, c := range samples {
		fmt.Fprintf(&b, "\n| %d | %d | %.3f | %d | %s | ", c.acked, c.pages, c.leaseMS, c.history, kib(c.total()))
		for _, n := range churnTables {
			for _, tb := range c.tables {
				if tb.name == n {
					fmt.Fprintf(&b, "%s (%s) | ", kib(tb.file), kib(tb.data+tb.index))
				}
			}
		}
	}
	if len(samples) > 0 {
		b.WriteString("\n\nlast sample, every table: name data index free .ibd rows(estimate)")
		for _, tb := range samples[len(samples)-1].tables {
			fmt.Fprintf(&b, "\n  %-16s %9s %9s %9s %9s %9d", tb.name, kib(tb.data), kib(tb.index), kib(tb.free), kib(tb.file), tb.rows)
		}
	}
	t.Log(b.String())
}

// runChurn drives n messages through a store at url/prefix, probing
// every n/10, and returns the samples (fresh first).
func runChurn(t testing.TB, url, prefix string, n, workers int, window int64, purgeEvery time.Duration) []churnSample {
	t.Helper()
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: url, Prefix: prefix, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("mysql", dsnOf(t, url))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const topic = "churn"
	var samples []churnSample
	start := time.Now()
	acked, err := storetest.Churn(ctx, s, storetest.ChurnConfig{
		Topic: topic, Messages: n, Workers: workers, Window: window, PurgeEvery: purgeEvery, Ballast: 1000,
		Probe: func(ctx context.Context, phase, acked int) error {
			c, err := probeChurn(ctx, conn, s, prefix, topic, acked)
			if err != nil {
				return err
			}
			samples = append(samples, c)
			var sizes []string
			for _, tb := range c.tables {
				if tb.file > 128<<10 {
					sizes = append(sizes, fmt.Sprintf("%s %s (data+index %s)", tb.name, kib(tb.file), kib(tb.data+tb.index)))
				}
			}
			t.Logf("phase %d: %d acked in %s; lease scan %d pages, %.3f ms; history list %d; .ibd files %s: %s", phase, acked, time.Since(start).Round(time.Second), c.pages, c.leaseMS, c.history, kib(c.total()), strings.Join(sizes, ", "))
			return nil
		},
	})
	if err != nil {
		t.Fatalf("churn: %v (after %d acked)", err, acked)
	}
	return samples
}

// dsnOf turns a mysql:// URL into go-sql-driver's DSN.
func dsnOf(t testing.TB, url string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(url, "mysql://")
	if !ok {
		t.Fatalf("%q: want mysql://user:pass@host:port/db", url)
	}
	cred, hostDB, _ := strings.Cut(rest, "@")
	user, pass, _ := strings.Cut(cred, ":")
	host, db, _ := strings.Cut(hostDB, "/")
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = user, pass, "tcp", host, db
	return c.FormatDSN()
}

// TestChurnBounded is issue #15's proof at CI size on InnoDB: messages
// sent, leased and acked in batches by several workers, tombstones
// purged after a short dedup window, purge as configured by default.
// After the churn a lease scan of the drained queue touches about the
// pages of a fresh table (not one per message ever sent, nor per message
// purge has not reached yet), and the tables' files stop growing.
func TestChurnBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("churn: -short")
	}
	srv := mysqltest.Shared(t)
	const n = 20000
	// A dedup window of 100 ms, purged every 100 ms: the tombstones'
	// steady state (a window's acks) comes early in the run whatever its
	// rate. With 1 s, purged every 500 ms, it came only after 1.5 s, half
	// the run once sends, leases and acks became set-based (20,000 acked
	// in 3 s, was 34 s), and the tombstone table grew through the second
	// half as it fills toward that state.
	samples := runChurn(t, srv.URL(), srv.NewPrefix(), n, 4, 100, 100*time.Millisecond)
	logChurn(t, samples)
	if len(samples) != 11 {
		t.Fatalf("%d samples, want 11", len(samples))
	}
	fresh, mid, last := samples[0], samples[5], samples[10]
	if last.acked != n {
		t.Fatalf("%d acked, want %d", last.acked, n)
	}
	// What a lease scan of the drained queue passes over is the
	// delete-marked records of the transactions purge has not reached
	// yet (the history list: a few batches). A probe right after a phase
	// can find up to that phase's 2,000 messages not purged yet (the
	// set-based store moves them in about 0.3 s). q_ready is clustered in
	// lease order (schema 12), so those records lie side by side in the
	// primary key's leaf pages, tens to a page: 2 – 19 page accesses were
	// measured at 30,000 messages a phase. Through a secondary key each
	// would cost a look at its row: schema 11 read 1,603 – 2,005 here
	// (and all 20,000 entries' worth were purge stuck).
	for _, c := range samples[1:] {
		if c.pages > fresh.pages+200 {
			t.Errorf("after %d acked, a lease scan of the drained queue touched %d pages; fresh: %d", c.acked, c.pages, fresh.pages)
		}
	}
	// No table's data + index ends more than 25 % + 128 KiB above its
	// largest size in the first half.
	for _, name := range churnTables {
		var peak int64 = -1 // the table's largest size in the first half
		for _, c := range samples[1:6] {
			peak = max(peak, c.size(name))
		}
		l := last.size(name)
		if peak < 0 || l < 0 {
			t.Fatalf("table %s not found in the samples", name)
		}
		// The tombstones' share of it follows the purger, a goroutine a
		// loaded machine can starve for a second (5,000 acks here): a
		// one-off spike leaves the B-tree's pages allocated, and CI saw
		// 592 KiB grow to 1,456 KiB and fall back to 1,120. Never
		// purged, the 20,000 tombstones take over 3 MiB, so a floor of
		// 2 MiB on the bound still fails a purge that does not purge.
		// The queue tables' data + index moves with purge lag too: CI saw
		// q_inflight at 32 KiB through the first half, then 272, 208, 144,
		// 32 and 176 KiB at the probes of the second. Never purged, its
		// 20,000 rows take well over 1 MiB, so a floor of 768 KiB still
		// fails a purge that does not purge.
		bound := max(peak+peak/4+128<<10, 768<<10)
		if name == "tombstone" {
			bound = max(bound, 2<<20)
		}
		if l > bound {
			t.Errorf("table %s grew from at most %s until %d acked to %s at %d", name, kib(peak), mid.acked, kib(l), last.acked)
		}
	}
}

// TestChurnReport is the full-size run behind docs/benchmarks.md ("Table
// bloat"); it runs only when DELAYQ_CHURN_MYSQL names a database (never
// the tests' own servers): the store's tables get the prefix
// delayq_churn_, dropped first.
//
//	DELAYQ_CHURN_MYSQL=mysql://root@127.0.0.1:3306/test DELAYQ_CHURN_N=1000000 \
//	  go test -count=1 -timeout 3h -run 'TestChurnReport$' -v ./internal/store/mysqlstore
//
// DELAYQ_CHURN_N (default 1,000,000) messages, DELAYQ_CHURN_WORKERS
// (default 4) senders and as many leasers, DELAYQ_CHURN_WINDOW_MS
// (default 10000) the dedup window, purged every second.
func TestChurnReport(t *testing.T) {
	url := os.Getenv("DELAYQ_CHURN_MYSQL")
	if url == "" {
		t.Skip("set DELAYQ_CHURN_MYSQL to a database URL to run the churn report")
	}
	n, workers, window := envInt(t, "DELAYQ_CHURN_N", 1_000_000), envInt(t, "DELAYQ_CHURN_WORKERS", 4), envInt(t, "DELAYQ_CHURN_WINDOW_MS", 10000)
	db, err := sql.Open("mysql", dsnOf(t, url))
	if err != nil {
		t.Fatal(err)
	}
	var version, purge string
	if err := db.QueryRowContext(ctx, "SELECT version(), @@innodb_purge_threads").Scan(&version, &purge); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; innodb_purge_threads=%s", version, purge)
	_ = db.Close()
	const prefix = "delayq_churn_"
	dropPrefix(t, url, prefix)
	logChurn(t, runChurn(t, url, prefix, n, workers, int64(window), time.Second))
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

// dropPrefix drops the tables and procedures of a store's prefix, which
// must end in "_", in the database of url.
func dropPrefix(t testing.TB, url, prefix string) {
	t.Helper()
	db, err := sql.Open("mysql", dsnOf(t, url))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT table_name FROM information_schema.TABLES WHERE table_schema = DATABASE() AND table_name LIKE ?", strings.ReplaceAll(prefix, "_", `\_`)+"%")
	if err != nil {
		t.Fatal(err)
	}
	var old []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		old = append(old, n)
	}
	rows.Close()
	for _, n := range old {
		if _, err := db.ExecContext(ctx, "DROP TABLE `"+n+"`"); err != nil { // #nosec G202 -- a table name read from information_schema
			t.Fatal(err)
		}
	}
	for _, p := range []string{"send", "send_priority", "migrate_priority", "migrate_topic_deleted"} {
		if _, err := db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS `"+prefix+p+"`"); err != nil { // #nosec G202 -- the test's prefix and constant names
			t.Fatal(err)
		}
	}
}
